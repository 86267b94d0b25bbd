// Runs the real `tsmodel` binary (path from TS_TSMODEL_BINARY) against the PyTorch fixture.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "model/data/listops_generator.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/calibration.h"
#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

struct ToolRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class TsmodelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeScratchDir();
    checkpoint_ = dir_ + "/tiny.ckpt";
  }

  // `environment`: "NAME=VALUE " assignments put before the command.
  ToolRun Tsmodel(const std::string& arguments, const std::string& environment = "") {
    const std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
    const std::string command =
        environment + std::string(TS_TSMODEL_BINARY) + " " + arguments + " >" + out + " 2>" + err;
    const int status = std::system(command.c_str());
    ToolRun run;
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = ReadFile(out).value();
    run.err = ReadFile(err).value();
    return run;
  }

  void Import() {
    const ToolRun run =
        Tsmodel("import-reference " + testing::SourcePath("tests/fixtures/reference_tiny.pt") +
                " --out " + checkpoint_ + " --labels neg,neu,pos --threads 1");
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }

  std::string dir_;
  std::string checkpoint_;
};

TEST_F(TsmodelTest, ListOpsWritesTheJobGeneratorsExamplesAsJsonLines) {
  const std::string out = dir_ + "/listops.jsonl";
  const ToolRun run = Tsmodel("listops --out " + out +
                              " --count 25 --min-length 10 --max-length 80 --seed 4 --threads 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Dataset expected = testing::ListOpsData(25, 10, 80, 4);
  ASSERT_FALSE(expected.examples.empty());
  const auto lines = Lines(ReadFile(out).value());
  ASSERT_EQ(lines.size(), expected.examples.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Example& example = expected.examples[i];
    EXPECT_EQ(lines[i], nlohmann::ordered_json({{"text", example.tokens},
                                                {"label", expected.label_names[example.label]}})
                            .dump())
        << i;
  }
  EXPECT_EQ(Tsmodel("listops --out " + out).exit_code, 2);  // --count is required
}

TEST_F(TsmodelTest, ImportThenInfo) {
  Import();
  const ToolRun run = Tsmodel("info " + checkpoint_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* expected :
       {"embed_dim=32 depth=2 heads=4 mlp_hidden=64", "modality: bytes", "labels: neg,neu,pos",
        "layer 1: heads=4 d=8 N0=73 N1=47", "crossover_tokens: 73 (formula N0)",
        "provenance.created_by: tsmodel import-reference"}) {
    EXPECT_NE(run.out.find(expected), std::string::npos) << expected << " in\n" << run.out;
  }
}

TEST_F(TsmodelTest, PredictPrintsOneJsonLinePerFileInInputOrder) {
  Import();
  // The long file first, so sorting by length for batching must not reorder the output.
  const std::string long_file = dir_ + "/long \"quoted\".txt";
  const std::string short_file = dir_ + "/short.txt";
  WriteText(long_file, "Linear attention, \xff" + std::string(1, '\0') +
                           "\x80 and back: O(N d^3) vs O(N^2 d)");
  WriteText(short_file, "TaylorShift");
  const std::string oversized = dir_ + "/oversized.bin";
  WriteText(oversized, std::string(100, 'z'));
  const ToolRun run =
      Tsmodel("predict --checkpoint " + checkpoint_ + " --batch-size 2 --path direct '" +
              long_file + "' " + short_file + " " + oversized);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = Lines(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_NE(lines[0].find(R"(long \"quoted\".txt")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("short.txt"), std::string::npos) << lines[1];
  // `tokens` is what the model saw, incl. CLS, as the server's ClassifyResponse counts it: the
  // 11 bytes plus CLS, and max_length (64) plus CLS for the truncated file.
  EXPECT_NE(lines[2].find(R"("tokens":65,"truncated":true)"), std::string::npos) << lines[2];
  EXPECT_NE(lines[1].find(R"("tokens":12,"truncated":false)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(R"("path":"direct")"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(R"("label":"neg")"), std::string::npos) << lines[1];

  // PyTorch's logits for these inputs (tests/fixtures/reference_tiny_logits.txt).
  const std::vector<std::vector<double>> expected = {
      {0.86190204062706877, -1.1819365285923862, 0.20493422210991707},
      {0.97810009328205627, -0.63480907249062679, 0.57213076889539805}};
  const std::vector<std::string> labels = {"neg", "neu", "pos"};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto object = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(object.is_object()) << lines[i];
    const auto& logits = object["logits"];
    ASSERT_EQ(logits.size(), 3u) << lines[i];
    // The schema of tsctl classify --json (common/json_output.h): labelled floats.
    const auto& probabilities = object["probabilities"];
    ASSERT_TRUE(probabilities.is_array()) << lines[i];
    ASSERT_EQ(probabilities.size(), 3u) << lines[i];
    double sum = 0;
    std::size_t best = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      const auto& entry = probabilities[k];
      ASSERT_EQ(entry.size(), 3u) << lines[i];
      EXPECT_EQ(entry.value("label", ""), labels[k]) << lines[i];
      EXPECT_EQ(entry.value("index", -1), static_cast<int>(k)) << lines[i];
      const double p = entry.value("probability", -1.0);
      EXPECT_GT(p, 0.0) << lines[i];
      // Written as floats: at most a float's 9 significant digits, not a double's 17.
      std::string digits = entry["probability"].dump();
      digits = digits.substr(0, digits.find('e'));
      digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
      EXPECT_LE(digits.size() - std::min(digits.size(), digits.find_first_not_of('0')), 9u)
          << lines[i];
      sum += p;
      if (logits[k].get<double>() > logits[best].get<double>()) best = k;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << lines[i];
    EXPECT_EQ(object.value("label", ""), labels[best]) << lines[i];
    if (i < expected.size()) {
      for (std::size_t k = 0; k < 3; ++k) {
        EXPECT_NEAR(logits[k].get<double>(), expected[i][k], 1e-4);
      }
    }
  }
}

TEST_F(TsmodelTest, PredictReportsAMissingFileInPlaceAndStillClassifiesTheOthers) {
  Import();
  const std::string first = dir_ + "/first.txt", last = dir_ + "/last.txt";
  const std::string missing = dir_ + "/missing.txt";
  // 37 bytes: the server answers tokens 38 for this file (37 + CLS).
  WriteText(first, std::string(37, 'a'));
  WriteText(last, "TaylorShift");
  const ToolRun run = Tsmodel("predict --checkpoint " + checkpoint_ + " --threads 1 " + first +
                              " " + missing + " " + last);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("1 of 3 files"), std::string::npos) << run.err;
  const auto lines = Lines(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  std::vector<nlohmann::json> objects;
  for (const std::string& line : lines) {
    objects.push_back(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false));
    ASSERT_TRUE(objects.back().is_object()) << line;
  }
  EXPECT_EQ(objects[0].value("file", ""), first);
  EXPECT_EQ(objects[0].value("tokens", -1), 38) << lines[0];
  EXPECT_TRUE(objects[0].contains("label")) << lines[0];
  // The failed input's object has tsctl classify --json's error shape, in its place.
  EXPECT_EQ(objects[1].value("file", ""), missing);
  ASSERT_EQ(objects[1].size(), 2u) << lines[1];
  EXPECT_EQ(objects[1]["error"].value("code", ""), "NOT_FOUND") << lines[1];
  EXPECT_NE(objects[1]["error"].value("message", "").find("missing.txt does not exist"),
            std::string::npos)
      << lines[1];
  EXPECT_EQ(objects[2].value("file", ""), last);
  EXPECT_EQ(objects[2].value("tokens", -1), 12) << lines[2];
}

// Issue 44: tsmodel predict reads only the first max_length bytes of a file (common/file_slice.h):
// a 64 GiB file (sparse past its head; reading it whole would need 64 GiB of memory) is
// predicted at once, with the tokens and logits of the file cut to max_length + 1 bytes.
TEST_F(TsmodelTest, PredictReadsOnlyTheHeadTheModelKeepsOfAHugeFile) {
  Import();
  const std::string head =
      "TaylorShift: linear attention for long documents, read only at the head.";
  ASSERT_GT(head.size(), 65u);  // max_length of the fixture: 64
  const std::string big = dir_ + "/huge.txt", cut = dir_ + "/cut.txt";
  WriteText(big, head);
  ASSERT_EQ(::truncate(big.c_str(), std::int64_t{64} << 30), 0);
  WriteText(cut, head.substr(0, 65));
  const ToolRun run =
      Tsmodel("predict --checkpoint " + checkpoint_ + " --threads 1 " + big + " " + cut);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = Lines(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  auto huge = nlohmann::json::parse(lines[0], nullptr, false);
  auto small = nlohmann::json::parse(lines[1], nullptr, false);
  ASSERT_TRUE(huge.is_object() && small.is_object()) << run.out;
  EXPECT_EQ(huge["tokens"], 65) << lines[0];
  EXPECT_EQ(huge["truncated"], true) << lines[0];
  EXPECT_EQ(huge["file"], big);
  huge.erase("file");
  small.erase("file");
  EXPECT_EQ(huge, small);
}

TEST_F(TsmodelTest, CalibrateThenUseTheCalibration) {
  Import();
  const std::string calibration = dir_ + "/calibration.txt";
  const bool bf16 = CheckPrecisionSupported(Precision::kBf16, torch::kCPU).ok();
  const std::string precisions = bf16 ? "fp32,bf16" : "fp32";
  ToolRun run = Tsmodel("calibrate " + checkpoint_ + " --out " + calibration +
                        " --repeats 1 --threads 1 --batch 1,4 --precision " + precisions);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("batch=4 precision=fp32"), std::string::npos) << run.out;
  const auto results = LoadCalibration(calibration);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ(results->size(), bf16 ? 4u : 2u);
  run = Tsmodel("info " + checkpoint_ + " --calibration " + calibration);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("(calibrated at fp32: batch 1: "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(", batch 4: "), std::string::npos) << run.out;
  if (bf16) {
    run = Tsmodel("info " + checkpoint_ + " --calibration " + calibration + " --precision bf16");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_NE(run.out.find("(calibrated at bf16: batch 1: "), std::string::npos) << run.out;
  }
  run = Tsmodel("calibrate " + checkpoint_ + " --out " + calibration + " --precision fp16");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("expected fp32 or bf16, got 'fp16'"), std::string::npos) << run.err;
}

// A precision this CPU cannot run is refused before anything is measured (it used to measure
// fp32 for minutes, then stop at bf16 and write nothing), and the kernels' cap is checked.
TEST_F(TsmodelTest, CalibrateRefusesAnUnsupportedPrecisionBeforeMeasuring) {
  Import();
  const std::string calibration = dir_ + "/calibration.txt";
  // Capped at AVX2, bf16 is unsupported on any CPU (TS_CPU_CAPABILITY,
  // model/kernels/cpu_features.h).
  ToolRun run = Tsmodel("calibrate " + checkpoint_ + " --out " + calibration +
                            " --repeats 1 --threads 1 --precision fp32,bf16",
                        "TS_CPU_CAPABILITY=avx2 ");
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_NE(run.err.find("precision bf16:"), std::string::npos) << run.err;
  EXPECT_EQ(run.out.find("precision=fp32"), std::string::npos) << "measured first: " << run.out;
  EXPECT_FALSE(ReadFile(calibration).ok());
  run = Tsmodel("info " + checkpoint_, "TS_CPU_CAPABILITY=avx2 ");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("cpu_kernels: "), std::string::npos) << run.out;
  run = Tsmodel("info " + checkpoint_, "TS_CPU_CAPABILITY=sse2 ");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("TS_CPU_CAPABILITY: CPU capability 'sse2' is not one of"),
            std::string::npos)
      << run.err;
}

// Issue 45: tsmodel predict on an empty file predicted a label (1 token) where the server refuses
// "input is empty (0 tokens)". Both run the bytes through PrepareTokens (model/api/inputs.h); the
// server's answer is checked in tests/server/server_integration_test.cc.
TEST_F(TsmodelTest, PredictRefusesAnEmptyFileAsTheServerDoes) {
  Import();
  WriteText(dir_ + "/empty.txt", "");
  WriteText(dir_ + "/one.txt", "a");
  const ToolRun run = Tsmodel("predict --checkpoint " + checkpoint_ + " " + dir_ + "/empty.txt " +
                              dir_ + "/one.txt");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const std::string refused =
      R"x("error":{"code":"INVALID_ARGUMENT","message":"input is empty (0 tokens)"})x";
  EXPECT_NE(run.out.find(refused), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find(R"("file":")" + dir_ + R"(/empty.txt","label")"), std::string::npos)
      << run.out;
  // The other file is still classified.
  EXPECT_NE(run.out.find(R"("tokens":2)"), std::string::npos) << run.out;
  EXPECT_NE(run.err.find("1 of 2 files could not be classified"), std::string::npos) << run.err;
}

TEST_F(TsmodelTest, ErrorsExitOneAndUsageErrorsExitTwo) {
  ToolRun run = Tsmodel("predict --checkpoint " + dir_ + "/absent.ckpt " + dir_ + "/x.txt");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("absent.ckpt does not exist"), std::string::npos) << run.err;

  WriteText(dir_ + "/broken.ckpt", "TSCKPT");
  run = Tsmodel("info " + dir_ + "/broken.ckpt");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("broken.ckpt"), std::string::npos) << run.err;

  run = Tsmodel("import-reference " +
                testing::SourcePath("tests/fixtures/reference_tiny_ordereddict.pt") + " --out " +
                dir_ + "/x.ckpt");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("OrderedDict"), std::string::npos) << run.err;

  Import();
  run = Tsmodel("predict --checkpoint " + checkpoint_ + " " + dir_ + "/missing.txt");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("missing.txt"), std::string::npos) << run.err;

  EXPECT_EQ(Tsmodel("predict " + dir_ + "/x.txt").exit_code, 2);
  EXPECT_EQ(Tsmodel("predict --checkpoint " + checkpoint_ + " --path fastest x").exit_code, 2);
  EXPECT_EQ(Tsmodel("predict --checkpoint " + checkpoint_ + " --threads 0 x").exit_code, 2);
  EXPECT_EQ(Tsmodel("info " + checkpoint_ + " --colour blue").exit_code, 2);
  EXPECT_EQ(Tsmodel("transmogrify").exit_code, 2);
  EXPECT_EQ(Tsmodel("").exit_code, 2);
  run = Tsmodel("--help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("import-reference"), std::string::npos);
}

}  // namespace
}  // namespace ts
