// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
// 2019): Adam moments with a per-parameter trust ratio, as a torch::optim::Optimizer.
//
// For each parameter w with gradient g at step t (per parameter, starting at 1):
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//   m̂ = m / (1-β1^t);     v̂ = v / (1-β2^t)
//   u = m̂ / (√v̂ + eps) + weight_decay·w
//   r = ‖w‖/‖u‖ when both norms are > 0, else 1
//   w -= lr·r·u
// Parameters without a gradient are skipped (their step count does not advance). Sparse
// gradients are rejected (c10::Error). State (step, exp_avg, exp_avg_sq) and the options
// serialize like torch::optim::Adam's, so `torch::save(optimizer, stream)` / `torch::load` round
// trip. Not thread-safe, like every torch optimizer.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace ts {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3);  // NOLINT(google-explicit-constructor): like AdamOptions
  // Step size; the update of a parameter has norm lr·‖w‖ (trust ratio applied).
  TORCH_ARG(double, lr) = 1e-3;
  typedef std::tuple<double, double> betas_t;
  // Decay rates of the first and second moment estimates, each in [0, 1).
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  // Added to √v̂ for stability; ≥ 0.
  TORCH_ARG(double, eps) = 1e-6;
  // Decoupled weight decay, added to the Adam direction before the trust ratio; ≥ 0.
  TORCH_ARG(double, weight_decay) = 0.0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LambOptions& lhs, const LambOptions& rhs);
  ~LambOptions() override = default;
  double get_lr() const override;
  void set_lr(const double lr) override;
};

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(std::int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const LambParamState& lhs, const LambParamState& rhs);
  ~LambParamState() override = default;
};

class Lamb : public torch::optim::Optimizer {
 public:
  // Throws c10::Error for lr < 0, eps < 0, betas outside [0, 1) or weight_decay < 0.
  explicit Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                LambOptions defaults = {});
  explicit Lamb(std::vector<torch::Tensor> params, const LambOptions& defaults = {})
      : Lamb({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    _TORCH_OPTIM_SERIALIZE_WITH_TEMPLATE_ARG(Lamb);
  }
};

}  // namespace ts
