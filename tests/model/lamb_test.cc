#include "model/training/lamb.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "model/torch_compat.h"

namespace ts {
namespace {

// Independent scalar LAMB on std::vector<double>, written from the paper's update rule.
struct ScalarLamb {
  double lr, beta1, beta2, eps, weight_decay;
  std::vector<double> m, v;
  int t = 0;

  void Step(std::vector<double>& w, const std::vector<double>& g) {
    if (m.empty()) {
      m.assign(w.size(), 0.0);
      v.assign(w.size(), 0.0);
    }
    ++t;
    std::vector<double> u(w.size());
    double w_norm2 = 0.0;
    double u_norm2 = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = v[i] / (1 - std::pow(beta2, t));
      u[i] = m_hat / (std::sqrt(v_hat) + eps) + weight_decay * w[i];
      w_norm2 += w[i] * w[i];
      u_norm2 += u[i] * u[i];
    }
    const double ratio = w_norm2 > 0 && u_norm2 > 0 ? std::sqrt(w_norm2) / std::sqrt(u_norm2) : 1.0;
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * ratio * u[i];
  }
};

torch::Tensor Param(const std::vector<double>& values) {
  return torch::tensor(values, torch::kFloat64).requires_grad_(true);
}

void SetGrad(torch::Tensor& p, const std::vector<double>& values) {
  p.mutable_grad() = torch::tensor(values, torch::kFloat64);
}

void ExpectValues(const torch::Tensor& p, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(p.numel(), static_cast<std::int64_t>(expected.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(p[static_cast<std::int64_t>(i)].item<double>(), expected[i], tol) << "index " << i;
  }
}

TEST(LambTest, OneStepMatchesHandComputedValues) {
  // Step 1: m̂ = g, v̂ = g², so u = g/(|g| + eps) and r = ‖w‖/‖u‖ = √14/‖u‖ (‖u‖ ≈ √3).
  torch::Tensor w = Param({1.0, -2.0, 3.0});
  Lamb lamb({w}, LambOptions(0.1).eps(1e-6));
  SetGrad(w, {0.5, -0.25, 1.0});
  lamb.step();
  // Values from the formula above, evaluated separately in float64.
  ExpectValues(w, {0.78397523804548941, -1.7839756700932852, 2.7839750220209436}, 1e-12);
  // The update has norm lr·‖w‖ (the point of the trust ratio).
  const double moved = (w - torch::tensor({1.0, -2.0, 3.0}, torch::kFloat64)).norm().item<double>();
  EXPECT_NEAR(moved, 0.1 * std::sqrt(14.0), 1e-12);
}

TEST(LambTest, TwoStepsWithWeightDecayMatchScalarReference) {
  const std::vector<double> w0 = {0.3, -1.2, 0.7, 2.0};
  const std::vector<std::vector<double>> grads = {{0.1, -0.4, 0.25, -0.05}, {-0.3, 0.2, 0.05, 0.6}};
  for (const double weight_decay : {0.0, 0.1}) {
    SCOPED_TRACE(weight_decay);
    torch::Tensor w = Param(w0);
    Lamb lamb({w}, LambOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(weight_decay));
    ScalarLamb reference{0.05, 0.8, 0.95, 1e-6, weight_decay, {}, {}};
    std::vector<double> expected = w0;
    for (const auto& g : grads) {
      SetGrad(w, g);
      lamb.step();
      reference.Step(expected, g);
      ExpectValues(w, expected, 1e-12);
    }
  }
  // Weight decay changes the result (it is not silently ignored).
  torch::Tensor a = Param(w0);
  torch::Tensor b = Param(w0);
  Lamb plain({a}, LambOptions(0.05));
  Lamb decayed({b}, LambOptions(0.05).weight_decay(0.5));
  SetGrad(a, grads[0]);
  SetGrad(b, grads[0]);
  plain.step();
  decayed.step();
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-3);
}

TEST(LambTest, ZeroNormsUseTrustRatioOne) {
  // ‖w‖ = 0: r = 1, so w = -lr·u with u = g/(|g| + eps).
  torch::Tensor w = Param({0.0, 0.0});
  Lamb lamb({w}, LambOptions(0.1).eps(1e-6));
  SetGrad(w, {2.0, -0.5});
  lamb.step();
  ExpectValues(w, {-0.1 * 2.0 / (2.0 + 1e-6), 0.1 * 0.5 / (0.5 + 1e-6)}, 1e-12);

  // ‖u‖ = 0 (zero gradient, no decay): r = 1 and the weights stay (no NaN from 0/0).
  torch::Tensor z = Param({1.5, -0.5});
  Lamb lamb_zero({z}, LambOptions(0.1));
  SetGrad(z, {0.0, 0.0});
  lamb_zero.step();
  ExpectValues(z, {1.5, -0.5}, 0.0);
}

TEST(LambTest, ParametersWithoutGradientAreSkipped) {
  torch::Tensor with_grad = Param({1.0});
  torch::Tensor without_grad = Param({2.0});
  Lamb lamb({with_grad, without_grad}, LambOptions(0.1));
  SetGrad(with_grad, {1.0});
  lamb.step();
  EXPECT_NE(with_grad.item<double>(), 1.0);
  EXPECT_EQ(without_grad.item<double>(), 2.0);
}

TEST(LambTest, InvalidOptionsThrow) {
  torch::Tensor w = Param({1.0});
  EXPECT_THROW(Lamb({w}, LambOptions(-1.0)), c10::Error);
  EXPECT_THROW(Lamb({w}, LambOptions(0.1).betas({1.0, 0.9})), c10::Error);
  EXPECT_THROW(Lamb({w}, LambOptions(0.1).weight_decay(-0.1)), c10::Error);
}

TEST(LambTest, SaveLoadRoundTripGivesIdenticalNextSteps) {
  const std::vector<double> w0 = {0.5, -1.0, 1.5};
  torch::Tensor a = Param(w0);
  torch::Tensor a2 = Param({0.25, 0.75});
  Lamb original({a, a2}, LambOptions(0.02).betas({0.85, 0.99}).weight_decay(0.01));
  SetGrad(a, {0.3, -0.2, 0.1});
  SetGrad(a2, {-1.0, 0.5});
  original.step();
  SetGrad(a, {-0.1, 0.4, 0.2});
  SetGrad(a2, {0.2, 0.1});
  original.step();

  std::stringstream stream;
  torch::save(original, stream);

  // A fresh optimizer over copies of the current weights. Like torch::optim::Adam, loading
  // restores the per-parameter state only; the options come from the constructor.
  torch::Tensor b = a.detach().clone().requires_grad_(true);
  torch::Tensor b2 = a2.detach().clone().requires_grad_(true);
  Lamb restored({b, b2}, LambOptions(0.02).betas({0.85, 0.99}).weight_decay(0.01));
  torch::load(restored, stream);
  ASSERT_EQ(restored.state().size(), 2u);

  for (int i = 0; i < 2; ++i) {
    for (torch::Tensor* p : {&a, &b}) SetGrad(*p, {0.05 * (i + 1), -0.3, 0.7});
    for (torch::Tensor* p : {&a2, &b2}) SetGrad(*p, {0.4, -0.6 * (i + 1)});
    original.step();
    restored.step();
    EXPECT_TRUE(torch::equal(a, b)) << a << b;
    EXPECT_TRUE(torch::equal(a2, b2)) << a2 << b2;
  }
  // Without the moments the next step would differ: the state really was restored.
  torch::Tensor c = Param(w0);
  Lamb fresh({c}, LambOptions(0.02).betas({0.85, 0.99}).weight_decay(0.01));
  SetGrad(c, {0.3, -0.2, 0.1});
  fresh.step();
  torch::Tensor d = Param(w0);
  Lamb reloaded_fresh({d}, LambOptions(0.02).betas({0.85, 0.99}).weight_decay(0.01));
  std::stringstream fresh_stream;
  torch::save(fresh, fresh_stream);
  torch::load(reloaded_fresh, fresh_stream);
  const auto& state =
      static_cast<const LambParamState&>(*reloaded_fresh.state().at(compat::ParamStateKey(d)));
  EXPECT_EQ(state.step(), 1);
  EXPECT_TRUE(
      torch::allclose(state.exp_avg(), 0.15 * torch::tensor({0.3, -0.2, 0.1}, torch::kFloat64)));
}

}  // namespace
}  // namespace ts
