// Training oracle: one optimizer step of the whole encoder through the real Trainer (float32)
// against PyTorch's autograd and optimizers in float64 (tests/fixtures/make_training_fixture.py,
// docs/TRAINING.md "Training oracle"). Fixed weights, one fixed right-padded batch of three
// sequences of different lengths; the loss, every parameter gradient and every updated weight
// must match, for both token embeddings, both Taylor paths, AdamW and LAMB, with gradient
// clipping active (clip norm half the gradient norm) and inactive (twice it).
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "model/api/attention_path.h"
#include "model/checkpoints/reference_import.h"
#include "model/training/training.h"
#include "tests/testing/encoder_testing.h"

namespace ts {
namespace {

// Tolerances, as ‖actual − expected‖ / ‖expected‖ per tensor (float32 run vs float64
// reference), from the largest errors observed over the 16 cases (docs/TRAINING.md) times
// 7–12: loss 1.6e-7, gradient 3.3e-6, update 1.4e-5, weight 9.1e-7. A gradient off by a sign
// or by a factor of 1.001, an update off by 1%, or a weight decay off by 5% fails.
constexpr double kLossTolerance = 2e-6;      // the scalar loss
constexpr double kGradientTolerance = 3e-5;  // each parameter's gradient (after clipping)
constexpr double kUpdateTolerance = 1e-4;    // each parameter's update w1 − w0
constexpr double kWeightTolerance = 1e-5;    // each updated weight w1

std::map<std::string, torch::Tensor> LoadTensorDict(const std::string& path) {
  const std::string bytes = ReadFile(path).value();
  std::map<std::string, torch::Tensor> tensors;
  const std::vector<char> pickled(bytes.begin(), bytes.end());
  for (const auto& entry : torch::pickle_load(pickled).toGenericDict()) {
    tensors.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return tensors;
}

double RelativeError(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto e = expected.to(torch::kFloat64);
  return ((actual.to(torch::kFloat64) - e).norm() / e.norm()).item<double>();
}

struct OracleCase {
  std::string embed;  // "linear" or "conv": fixture tests/fixtures/training_oracle_<embed>*.pt
  AttentionPath path;
  OptimizerKind optimizer;
  bool clip_active;
};

std::string CaseName(const OracleCase& c) {
  return c.embed + "_" + std::string(AttentionPathName(c.path)) + "_" +
         std::string(OptimizerKindName(c.optimizer)) + (c.clip_active ? "_clipped" : "_unclipped");
}

void PrintTo(const OracleCase& c, std::ostream* os) { *os << CaseName(c); }

class TrainingOracleTest : public ::testing::TestWithParam<OracleCase> {};

TEST_P(TrainingOracleTest, OneStepMatchesPyTorch) {
  const OracleCase& c = GetParam();
  const std::string stem = "tests/fixtures/training_oracle_" + c.embed;
  auto imported = ImportReferenceStateDict(testing::SourcePath(stem + ".pt"));
  ASSERT_TRUE(imported.ok()) << imported.status();
  ASSERT_EQ(imported->options.conv_embed(), c.embed == "conv");
  auto expected = LoadTensorDict(testing::SourcePath(stem + "_expected.pt"));
  const auto scalar = [&](const std::string& key) {
    EXPECT_EQ(expected.count(key), 1u) << "fixture lacks " << key;
    return expected.count(key) ? expected.at(key).item<double>() : 0.0;
  };
  const std::string clip = c.clip_active ? "active" : "inactive";
  const std::string optimizer(OptimizerKindName(c.optimizer));

  TrainingOptions options;
  options.optimizer = c.optimizer;
  options.lr = scalar("option.lr");
  options.warmup_steps = static_cast<std::int64_t>(scalar("option.warmup_steps"));
  options.steps = static_cast<std::int64_t>(scalar("option.steps"));
  options.weight_decay = scalar("option.weight_decay");
  options.beta1 = scalar("option.beta1");
  options.beta2 = scalar("option.beta2");
  options.eps = scalar("option.eps");
  options.grad_clip_norm = scalar("clip." + clip);
  options.path = c.path;

  // The batch: the whole training set, so the one step sees all three sequences (in the
  // trainer's shuffled order, which the mean loss and its gradient do not depend on).
  std::vector<LabeledSequence> train;
  const auto tokens = expected.at("tokens");
  const auto lengths = expected.at("lengths");
  const auto labels = expected.at("labels");
  for (std::int64_t i = 0; i < tokens.size(0); ++i) {
    LabeledSequence example;
    for (std::int64_t j = 0; j < lengths[i].item<std::int64_t>(); ++j) {
      example.tokens.push_back(static_cast<char>(tokens[i][j].item<std::int64_t>()));
    }
    example.label = labels[i].item<std::int64_t>();
    train.push_back(std::move(example));
  }
  options.batch_size = static_cast<std::int64_t>(train.size());
  ASSERT_GT(lengths.max().item<std::int64_t>(), lengths.min().item<std::int64_t>())
      << "the batch must be padded";

  TaylorShiftEncoder model = imported->model;
  std::map<std::string, torch::Tensor> initial;
  for (const auto& item : model->named_parameters()) {
    ASSERT_EQ(item.value().scalar_type(), torch::kFloat32) << item.key();
    initial.emplace(item.key(), item.value().detach().clone());
  }
  auto trainer = Trainer::Create(model, imported->options, options, std::move(train), {});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const auto step = (*trainer)->Step();
  ASSERT_TRUE(step.ok()) << step.status();

  EXPECT_DOUBLE_EQ(step->lr, scalar("option.step1_lr"));
  const double expected_loss = scalar("loss");
  EXPECT_LE(std::abs(step->loss - expected_loss), kLossTolerance * std::abs(expected_loss))
      << "loss " << step->loss << " vs PyTorch " << expected_loss;

  // Clipping scales in place, so after the step each .grad is the clipped gradient.
  const double clip_coef = scalar("clip_coef." + clip);
  if (c.clip_active) {
    ASSERT_LT(clip_coef, 0.9) << "the clip norm must be below the gradient norm";
  } else {
    ASSERT_EQ(clip_coef, 1.0);
  }
  double worst_gradient = 0, worst_update = 0, worst_weight = 0;
  std::string worst_gradient_name, worst_update_name;
  double grad_norm_sq = 0;
  int compared = 0;
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    SCOPED_TRACE(name);
    const std::string grad_key = "grad." + name;
    const std::string weight_key = absl::StrCat("updated.", optimizer, ".", clip, ".", name);
    ASSERT_EQ(expected.count(grad_key), 1u);
    ASSERT_EQ(expected.count(weight_key), 1u);
    const torch::Tensor& grad = item.value().grad();
    ASSERT_TRUE(grad.defined());
    ASSERT_EQ(grad.sizes(), expected.at(grad_key).sizes());
    grad_norm_sq += grad.to(torch::kFloat64).square().sum().item<double>();

    const double gradient_error = RelativeError(grad, clip_coef * expected.at(grad_key));
    EXPECT_LE(gradient_error, kGradientTolerance) << "gradient";
    const auto w0 = initial.at(name).to(torch::kFloat64);
    const auto w1 = item.value().detach();
    const auto& w1_expected = expected.at(weight_key);
    const double update_error = RelativeError(w1.to(torch::kFloat64) - w0, w1_expected - w0);
    EXPECT_LE(update_error, kUpdateTolerance) << "update w1 - w0";
    const double weight_error = RelativeError(w1, w1_expected);
    EXPECT_LE(weight_error, kWeightTolerance) << "updated weight";
    if (gradient_error > worst_gradient) {
      worst_gradient = gradient_error;
      worst_gradient_name = name;
    }
    if (update_error > worst_update) {
      worst_update = update_error;
      worst_update_name = name;
    }
    worst_weight = std::max(worst_weight, weight_error);
    ++compared;
  }
  // Every parameter of the reference is a parameter of the model (and was compared).
  const auto references = std::count_if(expected.begin(), expected.end(), [](const auto& entry) {
    return entry.first.rfind("grad.", 0) == 0;
  });
  EXPECT_EQ(compared, references);
  // The clipped gradients have the clip norm; unclipped ones the reference's norm.
  EXPECT_NEAR(std::sqrt(grad_norm_sq), clip_coef * scalar("grad_norm"),
              kGradientTolerance * scalar("grad_norm"));
  std::printf(
      "[ oracle   ] %s: loss rel err %.2e; worst gradient %.2e (%s), update %.2e (%s), "
      "weight %.2e\n",
      CaseName(c).c_str(), std::abs(step->loss - expected_loss) / std::abs(expected_loss),
      worst_gradient, worst_gradient_name.c_str(), worst_update, worst_update_name.c_str(),
      worst_weight);
}

// The oracle can tell: clipping changes the expected step by far more than the tolerance (so a
// trainer that skipped clipping would fail), and so does the optimizer.
TEST(TrainingOracleFixtureTest, ClippingAndOptimizerVisibleInTheUpdate) {
  for (const std::string embed : {"linear", "conv"}) {
    SCOPED_TRACE(embed);
    auto expected = LoadTensorDict(
        testing::SourcePath("tests/fixtures/training_oracle_" + embed + "_expected.pt"));
    auto imported = ImportReferenceStateDict(
        testing::SourcePath("tests/fixtures/training_oracle_" + embed + ".pt"));
    ASSERT_TRUE(imported.ok()) << imported.status();
    const auto flat_update = [&](const std::string& variant) {
      std::vector<torch::Tensor> parts;
      for (const auto& item : imported->model->named_parameters()) {
        parts.push_back((expected.at("updated." + variant + "." + item.key()) -
                         item.value().detach().to(torch::kFloat64))
                            .flatten());
      }
      return torch::cat(parts);
    };
    EXPECT_GT(RelativeError(flat_update("adamw.active"), flat_update("adamw.inactive")),
              100 * kUpdateTolerance);
    EXPECT_GT(RelativeError(flat_update("lamb.active"), flat_update("lamb.inactive")),
              100 * kUpdateTolerance);
    EXPECT_GT(RelativeError(flat_update("lamb.inactive"), flat_update("adamw.inactive")),
              100 * kUpdateTolerance);
  }
}

std::vector<OracleCase> AllCases() {
  std::vector<OracleCase> cases;
  for (const char* embed : {"linear", "conv"}) {
    for (const auto path : {AttentionPath::kDirect, AttentionPath::kEfficient}) {
      for (const auto optimizer : {OptimizerKind::kAdamW, OptimizerKind::kLamb}) {
        for (const bool clip_active : {false, true}) {
          cases.push_back({embed, path, optimizer, clip_active});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TrainingOracleTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace ts
