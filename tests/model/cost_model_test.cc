#include "model/networks/cost_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/kernels/mixed_linear.h"
#include "model/networks/calibration.h"

namespace ts {
namespace {

TEST(CostModelTest, ReproducesThePapersCrossoverTable) {
  const std::vector<std::int64_t> dims = {8, 16, 32, 64, 128};
  const std::vector<std::int64_t> n0 = {73, 273, 1057, 4161, 16513};
  const std::vector<std::int64_t> n1 = {47, 159, 574, 2174, 8446};
  for (std::size_t i = 0; i < dims.size(); ++i) {
    EXPECT_EQ(SpeedCrossoverN0(dims[i]), n0[i]) << "d=" << dims[i];
    EXPECT_EQ(MemoryCrossoverN1(dims[i]), n1[i]) << "d=" << dims[i];
  }
}

TEST(CostModelTest, CrossoversAreWhereTheCostsMeet) {
  for (const std::int64_t d : {8, 16, 32, 64, 128}) {
    const double dd = static_cast<double>(d);
    const auto n0 = static_cast<double>(SpeedCrossoverN0(d));
    EXPECT_LT(DirectOps(n0 - 1, dd), EfficientOps(n0 - 1, dd));
    EXPECT_GE(DirectOps(n0, dd), EfficientOps(n0, dd));
    const auto n1 = static_cast<double>(MemoryCrossoverN1(d));
    EXPECT_LT(DirectMemoryEntries(n1 - 1, dd), EfficientMemoryEntries(n1 - 1, dd));
    EXPECT_GE(DirectMemoryEntries(n1, dd), EfficientMemoryEntries(n1, dd));
  }
}

TEST(CostModelTest, EncoderForwardOpsChargesQuadraticPathsQuadratically) {
  // source-lang's shape (models/source-lang-demo.yaml): C 64, depth 2, H 8 (d 8), L 128, at its
  // longest window, 2049 tokens. By hand: per block 8 heads × 4N²d + 6N² (softmax, direct) or
  // N(4d³+10d²+9d+4) (efficient), plus N × 2(4C² + 2CL) = N × 65536 for the products.
  const EncoderCostShape shape{64, 2, 8, 128};
  const double n = 2049;
  const double products = n * 65536;
  const double quadratic = 2 * (8 * (4 * n * n * 8 + 6 * n * n) + products);
  const double linear = 2 * (8 * n * (4 * 512 + 10 * 64 + 9 * 8 + 4) + products);
  EXPECT_DOUBLE_EQ(EncoderForwardOps(shape, n, AttentionPath::kSoftmax), quadratic);
  EXPECT_DOUBLE_EQ(EncoderForwardOps(shape, n, AttentionPath::kDirect), quadratic);
  EXPECT_DOUBLE_EQ(EncoderForwardOps(shape, n, AttentionPath::kEfficient), linear);
  EXPECT_DOUBLE_EQ(EncoderForwardOps(shape, n, AttentionPath::kAuto), linear);
  // 2.82 GFLOP against 0.359: the softmax window costs 7.9 efficient ones.
  EXPECT_NEAR(quadratic / 1e9, 2.82, 0.01);
  EXPECT_NEAR(linear / 1e9, 0.359, 0.001);
  // Doubling the tokens: quadratic paths about ×4 in their attention, linear ones ×2.
  EXPECT_DOUBLE_EQ(EncoderForwardOps(shape, 2 * n, AttentionPath::kEfficient), 2 * linear);
  EXPECT_GT(EncoderForwardOps(shape, 2 * n, AttentionPath::kSoftmax), 3.5 * quadratic);
  // Short sequences: auto charges the cheaper, direct.
  EXPECT_DOUBLE_EQ(EncoderForwardOps(shape, 33, AttentionPath::kAuto),
                   EncoderForwardOps(shape, 33, AttentionPath::kDirect));
}

TEST(CostModelTest, TrainingCrossoverFollowsTheMeasuredTable) {
  // The measured points (docs/PERFORMANCE.md, "Training throughput").
  EXPECT_EQ(TrainingCrossoverTokens(8), 122);
  EXPECT_EQ(TrainingCrossoverTokens(16), 271);
  EXPECT_EQ(TrainingCrossoverTokens(32), 546);
  // Between and beyond them it grows with d, as the work of the efficient path does.
  std::int64_t previous = 0;
  for (const std::int64_t d : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128}) {
    const std::int64_t tokens = TrainingCrossoverTokens(d);
    EXPECT_GT(tokens, previous) << "d=" << d;
    previous = tokens;
  }
  // Beyond the table: N0 scaled by the ratio measured at its end.
  EXPECT_NEAR(static_cast<double>(TrainingCrossoverTokens(64)),
              SpeedCrossoverN0(64) * 546.0 / SpeedCrossoverN0(32), 1.0);
}

class CalibrationFileTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) {
    return (std::filesystem::temp_directory_path() /
            (name + "-" + std::to_string(::getpid()) + ".txt"))
        .string();
  }
};

CalibrationResult Result(std::int64_t batch, Precision precision, std::int64_t crossover) {
  CalibrationResult r;
  r.head_dim = 32;
  r.heads = 8;
  r.batch = batch;
  r.device = "cpu";
  r.threads = 2;
  r.precision = precision;
  r.crossover_tokens = crossover;
  r.crossed = true;
  return r;
}

TEST_F(CalibrationFileTest, RoundTripsAndLooksUpByPrecisionAndBatch) {
  CalibrationResult small = Result(1, Precision::kFp32, 900);
  small.points = {{512, 0.01, 0.02}, {1024, 0.04, 0.03}};
  const CalibrationResult large = Result(16, Precision::kFp32, 400);
  const CalibrationResult bf16 = Result(1, Precision::kBf16, 600);
  const auto path = Path("calibration");
  ASSERT_TRUE(SaveCalibration(path, {small, large, bf16}).ok());
  const auto loaded = LoadCalibration(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ((*loaded)[0].crossover_tokens, 900);
  ASSERT_EQ((*loaded)[0].points.size(), 2u);
  EXPECT_DOUBLE_EQ((*loaded)[0].points[1].efficient_seconds, 0.03);
  EXPECT_EQ((*loaded)[2].precision, Precision::kBf16);

  const CrossoverTable fp32 = LookupCrossovers(*loaded, 32, 8, Precision::kFp32);
  ASSERT_EQ(fp32.entries().size(), 2u);
  EXPECT_EQ(fp32.For(1), 900);
  EXPECT_EQ(fp32.For(16), 400);
  // Batch 4 lies halfway between 1 and 16 in log batch: the geometric mean of 900 and 400.
  EXPECT_EQ(fp32.For(4), 600);
  EXPECT_EQ(fp32.For(64), 400);  // beyond the measured sizes: the nearest measurement
  EXPECT_EQ(fp32.Describe(), "batch 1: 900 tokens, batch 16: 400 tokens");
  const CrossoverTable low = LookupCrossovers(*loaded, 32, 8, Precision::kBf16);
  EXPECT_EQ(low.For(8), 600);
  EXPECT_TRUE(LookupCrossovers(*loaded, 16, 8, Precision::kFp32).empty());

  const auto missing = LoadCrossovers(path, 16, 8, Precision::kBf16);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("head_dim 16 with 8 heads at precision bf16"),
            std::string::npos)
      << missing.status();
  std::remove(path.c_str());
}

TEST_F(CalibrationFileTest, FilesWithoutAPrecisionAreFloat32) {
  const auto path = Path("old-calibration");
  std::ofstream(path) << "taylorshift-calibration 1\n"
                         "crossover head_dim=32 heads=8 batch=1 tokens=412 crossed=1 device=cpu "
                         "threads=2\n"
                         "point head_dim=32 heads=8 batch=1 tokens=256 direct_s=0.1 "
                         "efficient_s=0.2\n";
  const auto table = LoadCrossovers(path, 32, 8, Precision::kFp32);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->For(1), 412);
  EXPECT_EQ(LoadCrossovers(path, 32, 8, Precision::kBf16).status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(path) << "taylorshift-calibration 1\n"
                         "crossover head_dim=32 heads=8 batch=1 tokens=412 precision=fp16\n";
  const auto bad = LoadCalibration(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(":2: precision: expected fp32 or bf16, got 'fp16'"),
            std::string::npos)
      << bad.status();
  std::remove(path.c_str());
}

TEST_F(CalibrationFileTest, MalformedFilesGiveLineNumbers) {
  const auto path = Path("bad-calibration");
  {
    std::ofstream out(path);
    out << "taylorshift-calibration 1\ncrossover head_dim=32 heads=8 batch=1 tokens=x\n";
  }
  auto loaded = LoadCalibration(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(":2: missing or invalid non-negative integer 'tokens'"),
            std::string::npos)
      << loaded.status();
  {
    std::ofstream out(path);
    out << "taylorshift-calibration 1\ncrossover head_dim=32 heads=8 batch=1 tokens=9 threads=x\n";
  }
  loaded = LoadCalibration(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find(":2: invalid thread count 'threads=x'"),
            std::string::npos)
      << loaded.status();
  // Unknown keys are errors on both kinds of line, naming the keys the line may have.
  for (const std::string& line :
       {std::string("crossover head_dim=32 heads=8 batch=1 tokens=9 direct_s=1"),
        std::string(
            "crossover head_dim=32 heads=8 batch=1 tokens=9\n"
            "point head_dim=32 heads=8 batch=1 tokens=9 direct_s=1 efficient_s=2 crossed=1")}) {
    {
      std::ofstream out(path);
      out << "taylorshift-calibration 1\n   \n" << line << "\n";
    }
    loaded = LoadCalibration(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string key = line.find("point") != std::string::npos ? "crossed" : "direct_s";
    EXPECT_NE(loaded.status().message().find("unknown key '" + key + "'"), std::string::npos)
        << loaded.status();
    EXPECT_NE(loaded.status().message().find("expected one of head_dim, heads"), std::string::npos)
        << loaded.status();
  }
  {
    std::ofstream out(path);
    out << "something else\n";
  }
  EXPECT_EQ(LoadCalibration(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCalibration(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(CalibrationTest, MeasuresBothPathsAndReportsACrossoverInRange) {
  CalibrationOptions options;
  options.head_dim = 4;
  options.heads = 1;
  options.min_tokens = 16;
  options.max_tokens = 2048;
  options.repeats = 1;
  const auto result = CalibrateCrossover(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(result->points.empty());
  for (const auto& p : result->points) {
    EXPECT_GT(p.direct_seconds, 0);
    EXPECT_GT(p.efficient_seconds, 0);
  }
  EXPECT_GE(result->crossover_tokens, options.min_tokens);
  EXPECT_LE(result->crossover_tokens, options.max_tokens);
  options.max_tokens = 1;
  EXPECT_EQ(CalibrateCrossover(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A quiet machine (the injected timer: direct ∝ N², efficient ∝ N, equal at 256 tokens): two
// sweeps that agree, their crossover, no warning.
TEST(CalibrationTest, QuietTimingsTakeTwoSweepsAndNoWarning) {
  CalibrationOptions options;
  options.min_tokens = 32;
  options.max_tokens = 4096;
  int runs = 0;
  options.timer = [&](AttentionPath path, std::int64_t tokens, int) {
    ++runs;
    const double n = static_cast<double>(tokens);
    return path == AttentionPath::kDirect ? n * n : 256.0 * n;
  };
  const auto result = CalibrateCrossover(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->sweep_crossovers.size(), 2u);
  EXPECT_NEAR(static_cast<double>(result->crossover_tokens), 256, 256 * 0.2);
  EXPECT_EQ(result->sweep_crossovers[0], result->sweep_crossovers[1]);
  EXPECT_TRUE(result->warnings.empty()) << result->warnings.front();
  EXPECT_TRUE(result->crossed);
  // One round of `repeats` runs per point and path: nothing was re-measured.
  EXPECT_EQ(runs, 2 * 2 * options.repeats * static_cast<int>(result->points.size()));
}

// The machine: sweeps whose crossovers disagree (61 ... 257 tokens) get more sweeps,
// the median counts, and the caller is warned with every sweep's crossover.
TEST(CalibrationTest, DisagreeingSweepsAreRepeatedAndWarned) {
  CalibrationOptions options;
  options.min_tokens = 32;
  options.max_tokens = 4096;
  const std::int64_t equal_at[] = {64, 256, 128, 96};  // by sweep
  options.timer = [&](AttentionPath path, std::int64_t tokens, int sweep) {
    const double n = static_cast<double>(tokens);
    return path == AttentionPath::kDirect ? n * n : static_cast<double>(equal_at[sweep]) * n;
  };
  const auto result = CalibrateCrossover(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->sweep_crossovers.size(), 4u);  // 2, then up to max_sweeps
  // The median of ~64, ~256, ~128, ~96: between the middle two.
  EXPECT_GE(result->crossover_tokens, 90);
  EXPECT_LE(result->crossover_tokens, 140);
  ASSERT_EQ(result->warnings.size(), 1u);
  EXPECT_NE(result->warnings[0].find("the crossovers of 4 sweeps disagree by"), std::string::npos)
      << result->warnings[0];
  EXPECT_NE(result->warnings[0].find("using their median"), std::string::npos);
}

// A point whose timed runs disagree by more than 20 % is measured again (up to max_rounds); the
// best-agreeing round counts; one that never agrees is reported.
TEST(CalibrationTest, NoisyPointsAreMeasuredAgainAndReported) {
  CalibrationOptions options;
  options.min_tokens = 32;
  options.max_tokens = 4096;
  options.sweeps = 1;
  options.max_sweeps = 1;
  int noisy_runs = 0;
  options.timer = [&](AttentionPath path, std::int64_t tokens, int) {
    const double n = static_cast<double>(tokens);
    if (path == AttentionPath::kDirect) {
      if (tokens == 45) return (++noisy_runs % 2 == 0 ? 2.0 : 1.0) * n * n;  // never agrees
      return n * n;
    }
    return 256.0 * n;
  };
  const auto result = CalibrateCrossover(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(noisy_runs, options.max_rounds * options.repeats);
  ASSERT_EQ(result->warnings.size(), 1u);
  EXPECT_NE(result->warnings[0].find("1 of "), std::string::npos) << result->warnings[0];
  EXPECT_NE(result->warnings[0].find("(worst 100 %, direct at 45 tokens)"), std::string::npos)
      << result->warnings[0];
}

// At bf16 the sweep runs the bfloat16 feature products (where the CPU has them) and records
// the precision; where it lacks them the calibration is refused as a bf16 model is.
TEST(CalibrationTest, MeasuresAtTheModelsPrecisionOrRefusesWithoutBf16) {
  CalibrationOptions options;
  options.head_dim = 8;
  options.heads = 2;
  options.batch = 3;
  options.min_tokens = 64;
  options.max_tokens = 512;
  options.repeats = 1;
  options.precision = Precision::kBf16;
  const auto result = CalibrateCrossover(options);
  if (!CheckPrecisionSupported(Precision::kBf16, torch::kCPU).ok()) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
    return;
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->precision, Precision::kBf16);
  EXPECT_EQ(result->batch, 3);
  ASSERT_FALSE(result->points.empty());
  for (const auto& p : result->points) EXPECT_GT(p.efficient_seconds, 0);
}

}  // namespace
}  // namespace ts

namespace ts {
namespace {

TEST(TrainingMemoryTest, EstimateGrowsWithWhatAJobHoldsAndDirectOutgrowsEfficient) {
  TrainingMemoryShape shape;
  shape.embed_dim = 128;
  shape.depth = 4;
  shape.heads = 8;
  shape.mlp_hidden = 512;
  shape.max_length = 1024;
  shape.batch = 8;
  const auto base = EstimateTrainingMemory(shape);
  EXPECT_EQ(base.total_bytes, base.state_bytes + base.activation_bytes + base.attention_bytes +
                                  base.data_bytes + base.runtime_bytes);
  // Parameters of this encoder: embedding 256·128 + 4 blocks + head, ~0.83 M.
  EXPECT_GT(base.parameters, 800000);
  EXPECT_LT(base.parameters, 850000);
  TrainingMemoryShape twice = shape;
  twice.batch = 16;
  EXPECT_GT(EstimateTrainingMemory(twice).activation_bytes, base.activation_bytes * 19 / 10);
  TrainingMemoryShape wide = shape;
  wide.element_bytes = 8;
  EXPECT_EQ(EstimateTrainingMemory(wide).state_bytes, 2 * base.state_bytes);
  TrainingMemoryShape efficient = shape;
  efficient.direct_up_to_tokens = 0;
  TrainingMemoryShape softmax = shape;
  softmax.softmax = true;
  // The direct path recomputes its scores in backward: its attention grows like N (16x from 1k
  // to 16k tokens), the softmax baseline's like N².
  const auto direct_1k = EstimateTrainingMemory(shape).attention_bytes;
  const auto softmax_1k = EstimateTrainingMemory(softmax).attention_bytes;
  shape.max_length = efficient.max_length = softmax.max_length = 16384;
  EXPECT_GT(EstimateTrainingMemory(shape).attention_bytes, 12 * direct_1k);
  EXPECT_LT(EstimateTrainingMemory(shape).attention_bytes, 20 * direct_1k);
  EXPECT_GT(EstimateTrainingMemory(softmax).attention_bytes, 200 * softmax_1k);
  EXPECT_GT(EstimateTrainingMemory(softmax).attention_bytes,
            20 * EstimateTrainingMemory(shape).attention_bytes);
  // `auto` as the trainer runs it: direct up to the crossover, efficient above. The peak is the
  // larger side.
  TrainingMemoryShape automatic = efficient;
  automatic.direct_up_to_tokens = TrainingCrossoverTokens(16);
  const auto auto_estimate = EstimateTrainingMemory(automatic);
  EXPECT_TRUE(auto_estimate.efficient_at_max_length);
  EXPECT_GE(auto_estimate.attention_bytes, EstimateTrainingMemory(efficient).attention_bytes);
  // Below the crossover, auto is direct at max_length.
  automatic.max_length = 100;
  shape.max_length = 100;
  EXPECT_FALSE(EstimateTrainingMemory(automatic).efficient_at_max_length);
  EXPECT_EQ(EstimateTrainingMemory(automatic).attention_bytes,
            EstimateTrainingMemory(shape).attention_bytes);
}

TEST(TrainingMemoryTest, DominantTermsComeLargestFirst) {
  TrainingMemoryShape shape;
  shape.embed_dim = 64;
  shape.depth = 2;
  shape.heads = 8;
  shape.mlp_hidden = 128;
  shape.max_length = 2048;
  shape.batch = 16;
  shape.softmax = true;
  const auto terms = DominantMemoryTerms(EstimateTrainingMemory(shape));
  ASSERT_EQ(terms.size(), 5u);
  EXPECT_NE(terms.front().find("attention (softmax"), std::string::npos) << terms.front();
  EXPECT_NE(terms.front().find(" GiB "), std::string::npos) << terms.front();
}

}  // namespace
}  // namespace ts
