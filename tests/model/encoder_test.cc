#include "model/networks/encoder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/api/attention_path.h"
#include "model/networks/cost_model.h"
#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

using Shape = std::vector<std::int64_t>;

TaylorShiftEncoderOptions SmallOptions() {
  // C 16, H 4 (d 4), L 32, 3 classes, up to 24 tokens.
  return TaylorShiftEncoderOptions(/*embed_dim=*/16, /*depth=*/2, /*heads=*/4,
                                   /*max_length=*/24, /*num_classes=*/3)
      .mlp_hidden(32);
}

std::map<std::string, Shape> StateShapes(TaylorShiftEncoder& model) {
  std::map<std::string, Shape> shapes;
  for (const auto& item : model->named_parameters()) {
    shapes[item.key()] = item.value().sizes().vec();
  }
  for (const auto& item : model->named_buffers()) shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

TEST(EncoderTest, StateDictNamesAndShapesFollowTheReference) {
  TaylorShiftEncoder model(SmallOptions());
  std::map<std::string, Shape> expected = {
      {"patch_embed.weight", {16, 256}},
      {"patch_embed.bias", {16}},
      {"cls_token", {1, 1, 16}},
      {"pe", {1, 24, 16}},
      {"norm.weight", {16}},
      {"norm.bias", {16}},
      {"head.weight", {3, 16}},
      {"head.bias", {3}},
  };
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    expected[b + "norm1.weight"] = {16};
    expected[b + "norm1.bias"] = {16};
    expected[b + "attn.qkv.weight"] = {48, 16};
    expected[b + "attn.qkv.bias"] = {48};
    expected[b + "attn.temperature"] = {1, 4, 1, 1};
    expected[b + "attn.proj.weight"] = {16, 16};
    expected[b + "attn.proj.bias"] = {16};
    expected[b + "norm2.weight"] = {16};
    expected[b + "norm2.bias"] = {16};
    expected[b + "mlp.fc1.weight"] = {32, 16};
    expected[b + "mlp.fc1.bias"] = {32};
    expected[b + "mlp.fc2.weight"] = {16, 32};
    expected[b + "mlp.fc2.bias"] = {16};
  }
  EXPECT_EQ(StateShapes(model), expected);
  // `pe` is a buffer, not a parameter.
  EXPECT_EQ(model->named_parameters().find("pe"), nullptr);
  EXPECT_NE(model->named_buffers().find("pe"), nullptr);
}

TEST(EncoderTest, ConvEmbedNamesAndShapesFollowTheReference) {
  TaylorShiftEncoder model(SmallOptions().conv_embed(true).qkv_bias(false));
  const auto shapes = StateShapes(model);
  const std::map<std::string, Shape> embed = {
      {"patch_embed.proj.0.weight", {4, 256, 3}}, {"patch_embed.proj.1.weight", {4}},
      {"patch_embed.proj.1.bias", {4}},           {"patch_embed.proj.3.weight", {8, 4, 3}},
      {"patch_embed.proj.4.weight", {8}},         {"patch_embed.proj.4.bias", {8}},
      {"patch_embed.proj.6.weight", {16, 8, 3}},  {"patch_embed.proj.7.weight", {16}},
      {"patch_embed.proj.7.bias", {16}},
  };
  for (const auto& [name, shape] : embed) {
    ASSERT_EQ(shapes.count(name), 1u) << name;
    EXPECT_EQ(shapes.at(name), shape) << name;
  }
  int embed_entries = 0;
  for (const auto& [name, shape] : shapes) embed_entries += name.rfind("patch_embed.", 0) == 0;
  EXPECT_EQ(embed_entries, 9);
  EXPECT_EQ(shapes.count("blocks.0.attn.qkv.bias"), 0u);
}

TEST(EncoderTest, FreshTokenEmbeddingOutweighsThePositionsItIsAddedTo) {
  // docs/TRAINING.md, "Initialisation": a token's vector must not drown in its sin/cos position
  // (RMS 1/√2), or the first LayerNorm passes on positions only and nothing is learned (issue 9;
  // ViT's 0.02 gave tokens RMS 0.02). The CLS token must stand clear of LayerNorm's √eps = 1e-3.
  torch::manual_seed(3);
  TaylorShiftEncoder model(TaylorShiftEncoderOptions(64, 1, 8, 512, 4));
  const double token_rms = model->patch_embed->weight.square().mean().sqrt().item<double>();
  const double position_rms = model->pe.square().mean().sqrt().item<double>();
  EXPECT_NEAR(position_rms, std::sqrt(0.5), 0.01);
  EXPECT_NEAR(token_rms, 1.0, 0.05);
  EXPECT_GT(token_rms, 1.3 * position_rms);
  const double cls_std = model->cls_token.std().item<double>();
  EXPECT_GT(cls_std, 10 * 1e-3);
  EXPECT_NEAR(cls_std, 0.02, 0.006);
  for (const auto& item : model->named_parameters()) {
    if (item.key().size() > 5 && item.key().substr(item.key().size() - 5) == ".bias") {
      EXPECT_EQ(item.value().abs().max().item<double>(), 0.0) << item.key();
    }
  }
}

TEST(EncoderTest, CountParametersMatchesTheArchitecture) {
  TaylorShiftEncoder model(SmallOptions());
  const std::int64_t c = 16, v = 256, l = 32, k = 3, h = 4;
  const std::int64_t block =
      2 * c + (3 * c * c + 3 * c) + h + (c * c + c) + 2 * c + (l * c + l) + (c * l + c);
  EXPECT_EQ(model->CountParameters(), c * v + c + c + 2 * block + 2 * c + k * c + k);
}

// The bound a checkpoint reader checks before it builds a model: never above what the model
// holds (a valid checkpoint would be refused), and exactly the tensors it says it counts.
TEST(EncoderTest, MinimumStateElementsBoundTheModelFromBelow) {
  for (const auto& options :
       {TaylorShiftEncoderOptions(16, 2, 4, 24, 3).mlp_hidden(32),
        TaylorShiftEncoderOptions(8, 1, 2, 16, 2).mlp_hidden(16),
        TaylorShiftEncoderOptions(32, 3, 4, 64, 5),  // mlp_hidden 0: 4·C
        TaylorShiftEncoderOptions(16, 2, 2, 40, 2).mlp_hidden(8).conv_embed(true).qkv_bias(false),
        TaylorShiftEncoderOptions(8, 2, 4, 300, 3).mlp_hidden(8).vocab_size(2)}) {
    TaylorShiftEncoder model(options);
    std::int64_t held = 0;
    // pe, the blocks' matrices (qkv, proj, fc1, fc2) and the head's.
    std::int64_t counted = model->pe.numel();
    for (const auto& item : model->named_parameters()) {
      held += item.value().numel();
      const bool block_matrix = item.key().rfind("blocks.", 0) == 0 && item.value().dim() == 2;
      if (block_matrix || item.key() == "head.weight") counted += item.value().numel();
    }
    for (const auto& item : model->named_buffers()) held += item.value().numel();
    const std::int64_t bound = MinimumEncoderStateElements(options);
    EXPECT_LE(bound, held) << DescribeEncoderOptions(options);
    EXPECT_EQ(bound, counted) << DescribeEncoderOptions(options);
  }
  // Sizes whose products overflow int64 saturate.
  EXPECT_EQ(MinimumEncoderStateElements(
                TaylorShiftEncoderOptions(std::int64_t{1} << 40, 1 << 30, 1, 1, 1)),
            std::numeric_limits<std::int64_t>::max());
}

TEST(EncoderTest, PositionsMatchTheSinCosFormula) {
  TaylorShiftEncoder model(SmallOptions());
  const auto pe = model->pe.to(torch::kDouble);
  ASSERT_EQ(pe.scalar_type(), torch::kDouble);
  const int c = 16;
  for (int pos = 0; pos < 24; ++pos) {
    for (int i = 0; i < c / 2; ++i) {
      const double angle = pos * std::exp(-std::log(10000.0) * (2.0 * i) / c);
      EXPECT_NEAR(pe[0][pos][2 * i].item<double>(), std::sin(angle), 1e-5) << pos << "," << i;
      EXPECT_NEAR(pe[0][pos][2 * i + 1].item<double>(), std::cos(angle), 1e-5) << pos << "," << i;
    }
  }
  EXPECT_EQ(model->pe.scalar_type(), torch::kFloat32);
}

TEST(EncoderTest, OutputShapeAndEmptySequences) {
  TaylorShiftEncoder model(SmallOptions());
  model->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 256, {3, 10}, torch::kLong);
  EXPECT_EQ(model->forward(tokens, torch::tensor({10, 0, 4})).sizes(), (Shape{3, 3}));
  // A batch of empty documents still classifies (attention sees only CLS).
  const auto empty = model->forward(torch::zeros({2, 0}, torch::kLong));
  EXPECT_EQ(empty.sizes(), (Shape{2, 3}));
  EXPECT_TRUE(torch::isfinite(empty).all().item<bool>());
}

// Each sequence alone vs. padded in a batch with longer ones (garbage in the padding).
class PaddingInvarianceTest
    : public ::testing::TestWithParam<std::tuple<AttentionPath, torch::Dtype, bool>> {};

TEST_P(PaddingInvarianceTest, LogitsDoNotDependOnTheBatch) {
  const auto [path, dtype, conv_embed] = GetParam();
  TaylorShiftEncoder model(SmallOptions().conv_embed(conv_embed));
  testing::RandomizeParameters(model, 7);
  model->to(dtype);
  model->eval();
  torch::NoGradGuard no_grad;

  torch::manual_seed(11);
  const std::vector<std::int64_t> lengths = {5, 23, 1, 12, 0};
  const std::int64_t longest = 23;
  const auto tokens = torch::randint(0, 256, {5, longest}, torch::kLong);
  const auto batched = model->forward(tokens, torch::tensor(lengths), path);
  ASSERT_EQ(batched.scalar_type(), dtype);

  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const auto alone = model->forward(tokens[i].narrow(0, 0, lengths[i]).unsqueeze(0), {}, path);
    const double difference = (alone[0] - batched[i]).abs().max().item<double>();
    EXPECT_LE(difference, 1e-5) << "sequence " << i << " (length " << lengths[i] << ")";
  }
  // The sequences really differ, so equality above is not vacuous.
  EXPECT_GT((batched[0] - batched[1]).abs().max().item<double>(), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, PaddingInvarianceTest,
                         ::testing::Combine(::testing::Values(AttentionPath::kDirect,
                                                              AttentionPath::kEfficient,
                                                              AttentionPath::kSoftmax),
                                            ::testing::Values(torch::kFloat64, torch::kFloat32),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(AttentionPathName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == torch::kFloat64 ? "_fp64" : "_fp32") +
                                  (std::get<2>(info.param) ? "_conv" : "_linear");
                         });

TEST(EncoderTest, ConvEmbedPaddingPositionsDoNotLeakIntoStatistics) {
  // The padded tail of the conv embedding must not shift GroupNorm statistics: changing only
  // padding tokens leaves the real positions' logits unchanged.
  TaylorShiftEncoder model(SmallOptions().conv_embed(true));
  testing::RandomizeParameters(model, 3);
  model->to(torch::kDouble);
  model->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 256, {1, 20}, torch::kLong);
  auto other = tokens.clone();
  other.narrow(1, 8, 12).random_(0, 256);
  const auto lengths = torch::tensor({8});
  const auto a = model->forward(tokens, lengths, AttentionPath::kDirect);
  const auto b = model->forward(other, lengths, AttentionPath::kDirect);
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-12);
}

TEST(EncoderTest, AutoResolvesOncePerBatchWithTheCrossover) {
  TaylorShiftEncoder model(SmallOptions());
  testing::RandomizeParameters(model, 5);
  model->to(torch::kDouble);
  model->eval();
  torch::NoGradGuard no_grad;

  const std::int64_t n0 = SpeedCrossoverN0(4);
  EXPECT_EQ(model->crossover_tokens(), n0);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kAuto, n0), AttentionPath::kDirect);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kAuto, n0 + 1), AttentionPath::kEfficient);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kSoftmax, 1000), AttentionPath::kSoftmax);

  const auto tokens = torch::randint(0, 256, {2, 15}, torch::kLong);
  const auto lengths = torch::tensor({15, 9});
  model->set_crossover_tokens(10);  // 16 tokens with CLS → efficient
  EXPECT_EQ(model->ResolvePath(AttentionPath::kAuto, 16), AttentionPath::kEfficient);
  EXPECT_TRUE(torch::equal(model->forward(tokens, lengths, AttentionPath::kAuto),
                           model->forward(tokens, lengths, AttentionPath::kEfficient)));
  model->set_crossover_tokens(16);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kAuto, 16), AttentionPath::kDirect);
  EXPECT_TRUE(torch::equal(model->forward(tokens, lengths, AttentionPath::kAuto),
                           model->forward(tokens, lengths, AttentionPath::kDirect)));
  // Every layer follows the setting.
  for (const auto& block : *model->blocks) {
    EXPECT_EQ(block->as<TaylorShiftBlockImpl>()->attn->crossover_tokens(), 16);
  }
  model->set_crossover_tokens(0);
  EXPECT_EQ(model->crossover_tokens(), n0);
}

// A calibrated table makes kAuto depend on the batch's size: the same 16-token sequences run
// direct one at a time and efficient four at a time when batch 4's crossover is lower.
TEST(EncoderTest, AutoTakesTheCrossoverOfTheBatchSizeFromTheTable) {
  TaylorShiftEncoder model(SmallOptions());
  testing::RandomizeParameters(model, 6);
  model->to(torch::kDouble);
  model->eval();
  torch::NoGradGuard no_grad;
  CrossoverTable table;
  table.Add(1, 20);
  table.Add(4, 12);
  model->set_crossover_table(table);
  EXPECT_EQ(model->crossover_tokens(1), 20);
  EXPECT_EQ(model->crossover_tokens(2), 15);  // √(20·12) ≈ 15.5 → 15: log-log interpolation
  EXPECT_EQ(model->crossover_tokens(4), 12);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kAuto, 16, 1), AttentionPath::kDirect);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kAuto, 16, 4), AttentionPath::kEfficient);
  EXPECT_EQ(model->ResolvePath(AttentionPath::kDirect, 16, 4), AttentionPath::kDirect);

  const auto one = torch::randint(0, 256, {1, 15}, torch::kLong);
  const auto four = torch::randint(0, 256, {4, 15}, torch::kLong);
  EXPECT_TRUE(torch::equal(model->forward(one, {}, AttentionPath::kAuto),
                           model->forward(one, {}, AttentionPath::kDirect)));
  EXPECT_TRUE(torch::equal(model->forward(four, {}, AttentionPath::kAuto),
                           model->forward(four, {}, AttentionPath::kEfficient)));
  EXPECT_FALSE(torch::equal(model->forward(four, {}, AttentionPath::kAuto),
                            model->forward(four, {}, AttentionPath::kDirect)));
  // The checkpoint's crossover serves again once the table is cleared.
  model->set_crossover_table({});
  EXPECT_EQ(model->crossover_tokens(4), model->crossover_tokens());
}

TEST(EncoderTest, RejectsInvalidInputsWithClearErrors) {
  TaylorShiftEncoder model(SmallOptions());
  model->eval();
  torch::NoGradGuard no_grad;
  const auto message_of = [&](const torch::Tensor& tokens, const torch::Tensor& lengths) {
    try {
      model->forward(tokens, lengths);
    } catch (const c10::Error& e) {
      return e.msg();
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(torch::tensor({{1, 256}}), {}).find("token ids must be in [0, 256)"),
            std::string::npos);
  EXPECT_NE(message_of(torch::tensor({{-1, 2}}), {}).find("token ids must be in [0, 256)"),
            std::string::npos);
  EXPECT_NE(message_of(torch::zeros({1, 25}, torch::kLong), {}).find("exceeds max_length 24"),
            std::string::npos);
  EXPECT_NE(message_of(torch::zeros({2, 4}, torch::kLong), torch::tensor({4, 5})).find("lengths"),
            std::string::npos);
  EXPECT_NE(message_of(torch::zeros({1, 4}), {}).find("integer"), std::string::npos);
  EXPECT_NE(message_of(torch::zeros({4}, torch::kLong), {}).find("[batch, length]"),
            std::string::npos);
}

TEST(EncoderTest, TrainingModeIsStochasticAndEvalIsDeterministic) {
  TaylorShiftEncoder model(SmallOptions().drop_rate(0.2).drop_path(0.3).attn_drop(0.1));
  testing::RandomizeParameters(model, 9);
  const auto tokens = torch::randint(0, 256, {4, 12}, torch::kLong);
  const auto lengths = torch::tensor({12, 7, 3, 12});

  model->train();
  torch::manual_seed(1);
  const auto first = model->forward(tokens, lengths, AttentionPath::kDirect);
  const auto second = model->forward(tokens, lengths, AttentionPath::kDirect);
  EXPECT_GT((first - second).abs().max().item<double>(), 1e-4);
  // Gradients reach the embedding, the CLS token and the head.
  first.sum().backward();
  EXPECT_TRUE(model->patch_embed->weight.grad().defined());
  EXPECT_GT(model->cls_token.grad().abs().sum().item<double>(), 0.0);

  model->eval();
  torch::NoGradGuard no_grad;
  const auto a = model->forward(tokens, lengths, AttentionPath::kDirect);
  const auto b = model->forward(tokens, lengths, AttentionPath::kDirect);
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(EncoderTest, DropPathAloneChangesTrainingOutput) {
  TaylorShiftEncoder model(SmallOptions().drop_path(0.5));
  testing::RandomizeParameters(model, 13);
  const auto tokens = torch::randint(0, 256, {8, 6}, torch::kLong);
  torch::NoGradGuard no_grad;
  model->eval();
  const auto reference = model->forward(tokens, {}, AttentionPath::kDirect);
  model->train();
  torch::manual_seed(2);
  const auto dropped = model->forward(tokens, {}, AttentionPath::kDirect);
  EXPECT_GT((reference - dropped).abs().max().item<double>(), 1e-4);
}

TEST(EncoderTest, CudaMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const bool conv_embed : {false, true}) {
    TaylorShiftEncoder model(SmallOptions().conv_embed(conv_embed));
    testing::RandomizeParameters(model, 29);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto tokens = torch::randint(0, 256, {3, 20}, torch::kLong);
    const auto lengths = torch::tensor({20, 4, 11});
    for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
      const auto cpu = model->forward(tokens, lengths, path);
      model->to(torch::kCUDA);
      const auto cuda = model->forward(tokens.cuda(), lengths.cuda(), path).cpu();
      model->to(torch::kCPU);
      EXPECT_LE((cpu - cuda).abs().max().item<double>(), 1e-4)
          << AttentionPathName(path) << (conv_embed ? " conv" : " linear");
    }
  }
}

TEST(EncoderOptionsTest, DescriptionRoundTrips) {
  const auto options = SmallOptions().conv_embed(true).a(0.25).drop_path(0.1).crossover_tokens(99);
  const std::string description = DescribeEncoderOptions(options);
  EXPECT_NE(description.find("embed_dim=16"), std::string::npos);
  EXPECT_NE(description.find("a=0.25"), std::string::npos);
  EXPECT_NE(description.find("drop_path=0.1 "), std::string::npos);
  const auto parsed = ParseEncoderOptions(description);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(DescribeEncoderOptions(*parsed), description);
  EXPECT_EQ(EncoderOptionsToFields(*parsed), EncoderOptionsToFields(options));
}

TEST(EncoderOptionsTest, ParseRejectsUnknownMissingAndInvalid) {
  const std::string good = DescribeEncoderOptions(SmallOptions());
  EXPECT_NE(ParseEncoderOptions(good + " colour=blue").status().message().find("colour"),
            std::string::npos);
  EXPECT_NE(ParseEncoderOptions("embed_dim=16").status().message().find("missing"),
            std::string::npos);
  EXPECT_NE(ParseEncoderOptions(good + " depth=x").status().message().find("depth"),
            std::string::npos);
  auto fields = EncoderOptionsToFields(SmallOptions());
  for (auto& [name, value] : fields) {
    if (name == "heads") value = std::int64_t{3};
  }
  const auto status = EncoderOptionsFromFields(fields).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("divisible"), std::string::npos);
  EXPECT_FALSE(ValidateEncoderOptions(SmallOptions().a(0.1).c(1.0).b(1.0)).ok());
  EXPECT_THROW(TaylorShiftEncoder(SmallOptions().heads(5)), c10::Error);
}

TEST(EncoderOptionsTest, MlpHiddenDefaultsToFourTimesWidth) {
  TaylorShiftEncoder model(TaylorShiftEncoderOptions(16, 1, 2, 8, 2));
  EXPECT_EQ(model->options().mlp_hidden(), 64);
}

}  // namespace
}  // namespace ts
