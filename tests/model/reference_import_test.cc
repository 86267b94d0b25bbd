#include "model/checkpoints/reference_import.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "model/api/attention_path.h"
#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

// One line of a *_logits.txt fixture: the input bytes and PyTorch's float64 logits.
struct ReferenceCase {
  std::vector<std::int64_t> tokens;
  std::vector<double> logits;
};

std::vector<ReferenceCase> ReadReferenceLogits(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string hex;
    fields >> hex;
    ReferenceCase c;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
      c.tokens.push_back(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    double logit;
    while (fields >> logit) c.logits.push_back(logit);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::map<std::string, torch::Tensor> LoadFixtureState(const std::string& path) {
  const std::string bytes = ReadFile(path).value();
  std::map<std::string, torch::Tensor> state;
  const std::vector<char> pickled(bytes.begin(), bytes.end());
  for (const auto& entry : torch::pickle_load(pickled).toGenericDict()) {
    state.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return state;
}

torch::Tensor TokenTensor(const std::vector<std::int64_t>& tokens) {
  return torch::tensor(tokens, torch::kLong).view({1, -1});
}

struct FixtureSpec {
  const char* stem;
  bool conv_embed;
};

class ReferenceFixtureTest : public ::testing::TestWithParam<FixtureSpec> {};

TEST_P(ReferenceFixtureTest, LogitsMatchPyTorchOnEveryTaylorPath) {
  const auto spec = GetParam();
  auto imported = ImportReferenceStateDict(
      testing::SourcePath(std::string("tests/fixtures/") + spec.stem + ".pt"));
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->options.conv_embed(), spec.conv_embed);
  const auto cases = ReadReferenceLogits(
      testing::SourcePath(std::string("tests/fixtures/") + spec.stem + "_logits.txt"));
  ASSERT_EQ(cases.size(), 3u);
  auto& model = imported->model;
  torch::NoGradGuard no_grad;

  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    model->to(dtype);
    const double tolerance = dtype == torch::kFloat32 ? 1e-4 : 1e-9;
    for (const auto path :
         {AttentionPath::kDirect, AttentionPath::kEfficient, AttentionPath::kDirectReference,
          AttentionPath::kEfficientReference, AttentionPath::kAuto}) {
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto logits = model->forward(TokenTensor(cases[i].tokens), {}, path);
        ASSERT_EQ(logits.size(1), static_cast<std::int64_t>(cases[i].logits.size()));
        for (std::size_t k = 0; k < cases[i].logits.size(); ++k) {
          EXPECT_NEAR(logits[0][k].item<double>(), cases[i].logits[k], tolerance)
              << spec.stem << " case " << i << " class " << k << " path " << AttentionPathName(path)
              << " dtype " << dtype;
        }
      }
    }
    // All three padded into one batch.
    std::int64_t longest = 0;
    for (const auto& c : cases) longest = std::max<std::int64_t>(longest, c.tokens.size());
    auto tokens = torch::full({3, longest}, 65, torch::kLong);
    std::vector<std::int64_t> lengths;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      tokens[i].narrow(0, 0, cases[i].tokens.size()).copy_(TokenTensor(cases[i].tokens)[0]);
      lengths.push_back(cases[i].tokens.size());
    }
    const auto batched = model->forward(tokens, torch::tensor(lengths), AttentionPath::kDirect);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      for (std::size_t k = 0; k < cases[i].logits.size(); ++k) {
        EXPECT_NEAR(batched[i][k].item<double>(), cases[i].logits[k], tolerance)
            << spec.stem << " batched case " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceFixtureTest,
                         ::testing::Values(FixtureSpec{"reference_tiny", false},
                                           FixtureSpec{"reference_tiny_conv", true}),
                         [](const auto& info) { return std::string(info.param.stem); });

TEST(ReferenceImportTest, InfersTheArchitecture) {
  ReferenceImportOptions options;
  options.labels = {"a", "b", "c"};
  options.modality = "pixels";
  auto imported =
      ImportReferenceStateDict(testing::SourcePath("tests/fixtures/reference_tiny.pt"), options);
  ASSERT_TRUE(imported.ok()) << imported.status();
  const auto& o = imported->options;
  EXPECT_EQ(o.depth(), 2);
  EXPECT_EQ(o.embed_dim(), 32);
  EXPECT_EQ(o.heads(), 4);
  EXPECT_EQ(o.mlp_hidden(), 64);
  EXPECT_EQ(o.vocab_size(), 256);
  EXPECT_EQ(o.max_length(), 64);
  EXPECT_EQ(o.num_classes(), 3);
  EXPECT_TRUE(o.qkv_bias());
  EXPECT_FALSE(o.conv_embed());
  EXPECT_TRUE(o.input_normalize());
  EXPECT_TRUE(o.output_normalize());
  EXPECT_EQ(imported->metadata.labels, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(imported->metadata.modality, "pixels");
  EXPECT_NE(imported->metadata.provenance.at("source").find("reference_tiny.pt"),
            std::string::npos);
  EXPECT_FALSE(imported->model->is_training());

  auto defaults = ImportReferenceStateDict(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->metadata.labels, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(defaults->metadata.modality, "bytes");
}

TEST(ReferenceImportTest, LabelCountMustMatch) {
  ReferenceImportOptions options;
  options.labels = {"neg", "pos"};
  const auto status =
      ImportReferenceStateDict(testing::SourcePath("tests/fixtures/reference_tiny.pt"), options)
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("3 classes but 2 labels"), std::string::npos) << status;
}

TEST(ReferenceImportTest, MissingKeyIsNamedWithItsShape) {
  auto state = LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  state.erase("blocks.1.mlp.fc2.bias");
  auto status = ImportReferenceState(state, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("missing blocks.1.mlp.fc2.bias [32]"), std::string::npos)
      << status;

  state = LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  state.erase("head.weight");
  status = ImportReferenceState(state, {}).status();
  EXPECT_NE(status.message().find("missing head.weight (expected shape [K, 32])"),
            std::string::npos)
      << status;
}

TEST(ReferenceImportTest, WrongShapeNamesKeyExpectedAndActual) {
  auto state = LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  state["blocks.0.attn.proj.weight"] = torch::zeros({32, 31});
  auto status = ImportReferenceState(state, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      status.message().find("blocks.0.attn.proj.weight has shape [32, 31], expected [32, 32]"),
      std::string::npos)
      << status;

  state = LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  state["patch_embed.weight"] = torch::zeros({32});
  status = ImportReferenceState(state, {}).status();
  EXPECT_NE(status.message().find("patch_embed.weight has shape [32], expected [C, V]"),
            std::string::npos)
      << status;
}

TEST(ReferenceImportTest, UnexpectedKeysAreNamed) {
  auto state = LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  state["blocks.0.ls1.gamma"] = torch::ones({32});
  state["fc_norm.weight"] = torch::ones({32});
  const auto status = ImportReferenceState(state, {}).status();
  EXPECT_NE(status.message().find("unexpected keys blocks.0.ls1.gamma, fc_norm.weight"),
            std::string::npos)
      << status;
}

TEST(ReferenceImportTest, WithoutTemperatureHeadsMustBeGiven) {
  auto state = LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt"));
  state.erase("blocks.0.attn.temperature");
  state.erase("blocks.1.attn.temperature");
  auto status = ImportReferenceState(state, {}).status();
  EXPECT_NE(status.message().find("heads must be given"), std::string::npos) << status;

  ReferenceImportOptions options;
  options.heads = 4;
  auto imported = ImportReferenceState(state, options);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_FALSE(imported->options.input_normalize());
  EXPECT_EQ(imported->options.heads(), 4);

  // A heads value contradicting the temperature is refused.
  options.heads = 2;
  status = ImportReferenceState(
               LoadFixtureState(testing::SourcePath("tests/fixtures/reference_tiny.pt")), options)
               .status();
  EXPECT_NE(status.message().find("heads 2 was given"), std::string::npos) << status;
}

TEST(ReferenceImportTest, OrderedDictFileGivesAClearError) {
  const auto status =
      ImportReferenceStateDict(testing::SourcePath("tests/fixtures/reference_tiny_ordereddict.pt"))
          .status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("torch.save(dict(model.state_dict()), path)"), std::string::npos)
      << status;
}

TEST(ReferenceImportTest, MissingAndGarbageFilesAreErrors) {
  EXPECT_EQ(ImportReferenceStateDict("/nonexistent/model.pt").status().code(),
            absl::StatusCode::kNotFound);
  const std::string garbage = testing::MakeScratchDir() + "/garbage.pt";
  std::ofstream(garbage) << "not a pickle at all";
  EXPECT_FALSE(ImportReferenceStateDict(garbage).ok());
}

}  // namespace
}  // namespace ts
