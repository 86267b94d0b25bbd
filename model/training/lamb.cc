#include "model/training/lamb.h"

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "model/torch_compat.h"

namespace ts {

LambOptions::LambOptions(double lr) : lr_(lr) {}

bool operator==(const LambOptions& lhs, const LambOptions& rhs) {
  return lhs.lr() == rhs.lr() && lhs.betas() == rhs.betas() && lhs.eps() == rhs.eps() &&
         lhs.weight_decay() == rhs.weight_decay();
}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

double LambOptions::get_lr() const { return lr(); }

void LambOptions::set_lr(const double lr) { this->lr(lr); }

bool operator==(const LambParamState& lhs, const LambParamState& rhs) {
  return lhs.step() == rhs.step() && torch::equal(lhs.exp_avg(), rhs.exp_avg()) &&
         torch::equal(lhs.exp_avg_sq(), rhs.exp_avg_sq());
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(std::int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

Lamb::Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups, LambOptions defaults)
    : torch::optim::Optimizer(std::move(param_groups), std::make_unique<LambOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "Invalid learning rate: ", defaults.lr());
  TORCH_CHECK(defaults.eps() >= 0, "Invalid epsilon value: ", defaults.eps());
  const auto& betas = defaults.betas();
  TORCH_CHECK(0 <= std::get<0>(betas) && std::get<0>(betas) < 1.0,
              "Invalid beta parameter at index 0: ", std::get<0>(betas));
  TORCH_CHECK(0 <= std::get<1>(betas) && std::get<1>(betas) < 1.0,
              "Invalid beta parameter at index 1: ", std::get<1>(betas));
  TORCH_CHECK(defaults.weight_decay() >= 0,
              "Invalid weight_decay value: ", defaults.weight_decay());
}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "Lamb does not support sparse gradients");
      const compat::OptimizerStateKey key = compat::ParamStateKey(p);
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto state = std::make_unique<LambParamState>();
        state->step(0);
        state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<LambParamState&>(*it->second);
      state.step(state.step() + 1);
      torch::Tensor& exp_avg = state.exp_avg();
      torch::Tensor& exp_avg_sq = state.exp_avg_sq();
      exp_avg.mul_(beta1).add_(grad, 1.0 - beta1);
      exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);

      const double t = static_cast<double>(state.step());
      const double bias_correction1 = 1.0 - std::pow(beta1, t);
      const double bias_correction2 = 1.0 - std::pow(beta2, t);
      torch::Tensor denom = (exp_avg_sq / bias_correction2).sqrt_().add_(options.eps());
      torch::Tensor update = (exp_avg / bias_correction1).div_(denom);
      if (options.weight_decay() != 0) update.add_(p, options.weight_decay());

      // Kept on the device (no .item()) so a CUDA step does not synchronise per parameter.
      const torch::Tensor weight_norm = p.norm();
      const torch::Tensor update_norm = update.norm();
      const torch::Tensor trust_ratio =
          torch::where(weight_norm.gt(0).logical_and(update_norm.gt(0)), weight_norm / update_norm,
                       torch::ones_like(weight_norm));
      p.sub_(update.mul_(trust_ratio * options.lr()));
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }

void Lamb::load(torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace ts
