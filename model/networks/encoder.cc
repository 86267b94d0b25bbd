#include "model/networks/encoder.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "model/kernels/inference_ops.h"

namespace ts {
namespace {

namespace F = torch::nn::functional;

constexpr double kLayerNormEps = 1e-6;
// Initialisation (docs/TRAINING.md, "Initialisation"): chosen for byte-level models and measured
// by bench/learning_bench.py against the PyTorch reference recipe.
constexpr double kTokenEmbeddingInitStd = 1.0;
// Like the other embeddings' scale of ViT; well above √eps of the first LayerNorm (1e-3), so
// LayerNorm sees a direction rather than rounding noise (the reference's 1e-6 is below it).
constexpr double kClsTokenInitStd = 0.02;

std::int64_t ResolvedMlpHidden(const TaylorShiftEncoderOptions& options) {
  return options.mlp_hidden() > 0 ? options.mlp_hidden() : 4 * options.embed_dim();
}

// Stochastic depth: drops the whole residual branch per sample, rescaling the kept ones.
torch::Tensor DropPath(const torch::Tensor& x, double drop_prob, bool training) {
  if (!training || drop_prob <= 0.0) return x;
  const double keep = 1.0 - drop_prob;
  std::vector<std::int64_t> shape(x.dim(), 1);
  shape[0] = x.size(0);
  const auto mask = torch::empty(shape, x.options()).bernoulli_(keep).div_(keep);
  return x * mask;
}

// GroupNorm(1, channels) of x [B, Ch, N] whose statistics cover only positions where
// valid [B, 1, N] is true — what the reference computes on the unpadded sequence.
torch::Tensor MaskedGroupNorm(const torch::Tensor& x, const torch::Tensor& valid,
                              const torch::nn::GroupNorm& norm) {
  const auto invalid = valid.logical_not();
  const auto count = (valid.sum({1, 2}) * x.size(1)).clamp_min(1).to(x.scalar_type());
  const auto mean = x.masked_fill(invalid, 0).sum({1, 2}) / count;
  const auto centered = (x - mean.view({-1, 1, 1})).masked_fill(invalid, 0);
  const auto var = centered.square().sum({1, 2}) / count;
  const auto normalized = centered * torch::rsqrt(var + norm->options.eps()).view({-1, 1, 1});
  return normalized * norm->weight.view({1, -1, 1}) + norm->bias.view({1, -1, 1});
}

// pe[p, 2i] = sin(p·div_i), pe[p, 2i+1] = cos(p·div_i), div_i = exp(-ln(10000)·2i/C), computed in
// float32 like the reference. Returns [1, max_length, C] float32.
torch::Tensor SinusoidalPositions(std::int64_t max_length, std::int64_t embed_dim) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto pe = torch::zeros({max_length, embed_dim}, f32);
  const auto pos = torch::arange(0, max_length, f32).unsqueeze(1);
  // Same operation order as the reference: arange(0, C, 2) * (-ln(10000) / C), then exp.
  const auto div =
      torch::exp(torch::arange(0, embed_dim, 2, f32) *
                 (-torch::log(torch::tensor(10000.0f)) / static_cast<float>(embed_dim)));
  const auto angles = pos * div;
  using torch::indexing::None;
  using torch::indexing::Slice;
  pe.index_put_({Slice(), Slice(0, None, 2)}, torch::sin(angles));
  pe.index_put_({Slice(), Slice(1, None, 2)}, torch::cos(angles));
  return pe.view({1, max_length, embed_dim});
}

std::string FormatFieldValue(const EncoderOptionValue& value) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  // Shortest text that reads back to the same double.
  const double d = std::get<double>(value);
  char buffer[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, d);
    if (std::strtod(buffer, nullptr) == d) break;
  }
  return buffer;
}

using Options = TaylorShiftEncoderOptions;
// One field of the options, by its type (the alternatives in EncoderOptionValue's order).
using FieldRef = std::variant<std::int64_t*, double*, bool*>;

struct FieldSpec {
  const char* name;
  bool required;
  FieldRef (*field)(Options& options);
};

// The architecture record, in its order.
constexpr FieldSpec kFieldSpecs[] = {
    {"vocab_size", true, [](Options& o) -> FieldRef { return &o.vocab_size(); }},
    {"embed_dim", true, [](Options& o) -> FieldRef { return &o.embed_dim(); }},
    {"depth", true, [](Options& o) -> FieldRef { return &o.depth(); }},
    {"heads", true, [](Options& o) -> FieldRef { return &o.heads(); }},
    {"mlp_hidden", true, [](Options& o) -> FieldRef { return &o.mlp_hidden(); }},
    {"max_length", true, [](Options& o) -> FieldRef { return &o.max_length(); }},
    {"num_classes", true, [](Options& o) -> FieldRef { return &o.num_classes(); }},
    {"qkv_bias", true, [](Options& o) -> FieldRef { return &o.qkv_bias(); }},
    {"conv_embed", true, [](Options& o) -> FieldRef { return &o.conv_embed(); }},
    {"a", true, [](Options& o) -> FieldRef { return &o.a(); }},
    {"b", true, [](Options& o) -> FieldRef { return &o.b(); }},
    {"c", true, [](Options& o) -> FieldRef { return &o.c(); }},
    {"input_normalize", true, [](Options& o) -> FieldRef { return &o.input_normalize(); }},
    {"output_normalize", true, [](Options& o) -> FieldRef { return &o.output_normalize(); }},
    {"drop_rate", false, [](Options& o) -> FieldRef { return &o.drop_rate(); }},
    {"attn_drop", false, [](Options& o) -> FieldRef { return &o.attn_drop(); }},
    {"drop_path", false, [](Options& o) -> FieldRef { return &o.drop_path(); }},
    {"crossover_tokens", false, [](Options& o) -> FieldRef { return &o.crossover_tokens(); }},
};

const FieldSpec* FindFieldSpec(std::string_view name) {
  for (const auto& spec : kFieldSpecs) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

}  // namespace

absl::Status ValidateEncoderOptions(const TaylorShiftEncoderOptions& options) {
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, std::int64_t>>{
           {"vocab_size", options.vocab_size()},
           {"embed_dim", options.embed_dim()},
           {"depth", options.depth()},
           {"heads", options.heads()},
           {"max_length", options.max_length()},
           {"num_classes", options.num_classes()}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", value));
    }
  }
  if (options.mlp_hidden() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp_hidden must be positive (or 0 for 4·embed_dim), got ", options.mlp_hidden()));
  }
  if (options.embed_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embed_dim must be even (sin/cos positions), got ", options.embed_dim()));
  }
  if (options.embed_dim() % options.heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("embed_dim ", options.embed_dim(),
                                                   " is not divisible by heads ", options.heads()));
  }
  if (options.conv_embed() && options.embed_dim() % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv_embed needs embed_dim divisible by 4, got ", options.embed_dim()));
  }
  if (!(options.a() > 0.0) || !(options.c() >= options.b() * options.b() / (4.0 * options.a()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("Taylor coefficients need a > 0 and c >= b^2/(4a), got a=", options.a(),
                     " b=", options.b(), " c=", options.c()));
  }
  for (const auto& [name, value] :
       std::initializer_list<std::pair<const char*, double>>{{"drop_rate", options.drop_rate()},
                                                             {"attn_drop", options.attn_drop()},
                                                             {"drop_path", options.drop_path()}}) {
    if (!(value >= 0.0 && value < 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be in [0, 1), got ", value));
    }
  }
  if (options.crossover_tokens() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "crossover_tokens must be >= 0 (0 = formula), got ", options.crossover_tokens()));
  }
  return absl::OkStatus();
}

EncoderOptionFields EncoderOptionsToFields(const TaylorShiftEncoderOptions& options) {
  Options resolved = options;
  resolved.mlp_hidden(ResolvedMlpHidden(options));
  EncoderOptionFields fields;
  for (const auto& spec : kFieldSpecs) {
    std::visit([&](const auto* value) { fields.emplace_back(spec.name, *value); },
               spec.field(resolved));
  }
  return fields;
}

absl::StatusOr<TaylorShiftEncoderOptions> EncoderOptionsFromFields(
    const EncoderOptionFields& fields) {
  Options options(0, 0, 0, 0, 0);  // the optional fields keep their defaults
  std::set<std::string> given;
  for (const auto& [name, value] : fields) {
    const FieldSpec* spec = FindFieldSpec(name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown architecture field '", name, "'"));
    }
    const FieldRef field = spec->field(options);
    const bool type_ok =
        field.index() == value.index() ||
        (std::holds_alternative<double*>(field) && std::holds_alternative<std::int64_t>(value));
    if (!type_ok) {
      static constexpr const char* kKindNames[] = {"an integer", "a number", "a boolean"};
      return absl::InvalidArgumentError(
          absl::StrCat("architecture field '", name, "' must be ", kKindNames[field.index()]));
    }
    if (!given.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("architecture field '", name, "' given twice"));
    }
    std::visit(
        [](auto* to, const auto& from) { *to = static_cast<std::decay_t<decltype(*to)>>(from); },
        field, value);
  }
  for (const auto& spec : kFieldSpecs) {
    if (spec.required && given.count(spec.name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("architecture field '", spec.name, "' is missing"));
    }
  }
  if (options.mlp_hidden() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "architecture field 'mlp_hidden' must be positive, got ", options.mlp_hidden()));
  }
  TS_RETURN_IF_ERROR(ValidateEncoderOptions(options));
  return options;
}

std::int64_t MinimumEncoderStateElements(const TaylorShiftEncoderOptions& options) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const auto times = [](std::int64_t x, std::int64_t y) {
    std::int64_t product = 0;
    return x < 0 || y < 0 || __builtin_mul_overflow(x, y, &product) ? kMax : product;
  };
  const auto plus = [](std::int64_t x, std::int64_t y) {
    std::int64_t sum = 0;
    return __builtin_add_overflow(x, y, &sum) ? kMax : sum;
  };
  const std::int64_t dim = options.embed_dim();
  if (dim > kMax / 4) return kMax;  // ResolvedMlpHidden's 4·C
  const std::int64_t hidden = ResolvedMlpHidden(options);
  // Per block: qkv C×3C and proj C×C, fc1 C×L and fc2 L×C.
  const std::int64_t block = plus(times(4, times(dim, dim)), times(2, times(dim, hidden)));
  return plus(plus(times(options.max_length(), dim), times(options.depth(), block)),
              times(dim, options.num_classes()));
}

std::string DescribeEncoderOptions(const TaylorShiftEncoderOptions& options) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : EncoderOptionsToFields(options)) {
    parts.push_back(absl::StrCat(name, "=", FormatFieldValue(value)));
  }
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<TaylorShiftEncoderOptions> ParseEncoderOptions(std::string_view description) {
  EncoderOptionFields fields;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(description.data(), description.size()), ' ',
                      absl::SkipWhitespace())) {
    const auto eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected name=value in architecture description, got '", part, "'"));
    }
    const std::string name(part.substr(0, eq));
    const absl::string_view text = part.substr(eq + 1);
    const FieldSpec* spec = FindFieldSpec(name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown architecture field '", name, "'"));
    }
    Options scratch(0, 0, 0, 0, 0);  // the text parses into a field of the field's type
    const FieldRef field = spec->field(scratch);
    const bool parsed = field.index() == 0   ? absl::SimpleAtoi(text, std::get<0>(field))
                        : field.index() == 1 ? absl::SimpleAtod(text, std::get<1>(field))
                                             : absl::SimpleAtob(text, std::get<2>(field));
    if (!parsed) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot parse architecture field '", name, "' value '", text, "'"));
    }
    std::visit([&](const auto* value) { fields.emplace_back(name, *value); }, field);
  }
  return EncoderOptionsFromFields(fields);
}

// ---------------------------------------------------------------------------------------------

TaylorShiftMlpImpl::TaylorShiftMlpImpl(std::int64_t dim, std::int64_t hidden) {
  fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, dim));
}

torch::Tensor TaylorShiftMlpImpl::forward(const torch::Tensor& x) {
  if (is_training()) return fc2(F::gelu(fc1(x)));
  auto hidden = MixedLinear(fc1, fc1_low_, x);  // a tensor of its own: GELU may run in place
  if (CanRunInferenceOps(hidden) && hidden.is_contiguous()) {
    GeluInference_(hidden);
  } else {
    hidden = F::gelu(hidden);
  }
  return MixedLinear(fc2, fc2_low_, hidden);
}

void TaylorShiftMlpImpl::set_precision(Precision precision) {
  fc1_low_ = LowPrecisionWeight(fc1, precision);
  fc2_low_ = LowPrecisionWeight(fc2, precision);
}

TaylorShiftBlockImpl::TaylorShiftBlockImpl(const TaylorShiftAttentionOptions& attention,
                                           std::int64_t mlp_hidden, double drop_path)
    : drop_path_(drop_path) {
  const std::int64_t dim = attention.dim();
  norm1 = register_module(
      "norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps)));
  attn = register_module("attn", TaylorShiftAttention(attention));
  norm2 = register_module(
      "norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps)));
  mlp = register_module("mlp", TaylorShiftMlp(dim, mlp_hidden));
}

torch::Tensor TaylorShiftBlockImpl::forward(const torch::Tensor& x,
                                            const torch::Tensor& key_padding_mask,
                                            AttentionPath path) {
  auto y = x + DropPath(attn(Norm(norm1, x), key_padding_mask, path), drop_path_, is_training());
  return y + DropPath(mlp(Norm(norm2, y)), drop_path_, is_training());
}

torch::Tensor TaylorShiftBlockImpl::Norm(const torch::nn::LayerNorm& norm,
                                         const torch::Tensor& x) const {
  if (is_training() || !CanRunInferenceOps(x)) return norm.ptr()->forward(x);
  return LayerNormInference(x, norm->weight, norm->bias, norm->options.eps());
}

TextConvEmbedImpl::TextConvEmbedImpl(std::int64_t vocab_size, std::int64_t embed_dim) {
  proj = register_module("proj", torch::nn::Sequential());
  constexpr int kDepth = 3;
  for (int i = 0; i < kDepth; ++i) {
    const std::int64_t in = i == 0 ? vocab_size : embed_dim >> (kDepth - i);
    const std::int64_t out = embed_dim >> (kDepth - i - 1);
    convs_.emplace_back(torch::nn::Conv1dOptions(in, out, 3).padding(1).bias(false));
    norms_.emplace_back(torch::nn::GroupNormOptions(1, out));
    proj->push_back(convs_.back());
    proj->push_back(norms_.back());
    proj->push_back(torch::nn::GELU());
  }
}

torch::Tensor TextConvEmbedImpl::forward(const torch::Tensor& tokens, const torch::Tensor& valid) {
  const std::int64_t batch = tokens.size(0);
  const std::int64_t length = tokens.size(1);
  const std::int64_t out_dim = convs_.back()->options.out_channels();
  if (length == 0) return torch::zeros({batch, 0, out_dim}, convs_.back()->weight.options());
  const auto invalid = valid.logical_not();
  // Conv over one-hot input = sum over taps k of W[:, token[t + k - 1], k] (zero outside [0, len)):
  // one gather of all three taps from W laid out as [V, 3, C1].
  const auto& w0 = convs_[0]->weight;  // [C1, V, 3]
  const auto table = w0.permute({1, 2, 0}).reshape({w0.size(1), -1});
  const auto gathered = torch::embedding(table, tokens)
                            .masked_fill(invalid.unsqueeze(-1), 0)
                            .view({batch, length, 3, w0.size(0)});
  const std::vector<torch::Tensor> taps = gathered.unbind(2);
  auto x = taps[1];
  if (length > 1) {
    x = x + torch::constant_pad_nd(taps[0].narrow(1, 0, length - 1), {0, 0, 1, 0}) +
        torch::constant_pad_nd(taps[2].narrow(1, 1, length - 1), {0, 0, 0, 1});
  }
  x = x.transpose(1, 2);  // [B, C1, N]
  const auto keep = valid.unsqueeze(1);
  const auto drop = invalid.unsqueeze(1);
  for (std::size_t i = 0; i < convs_.size(); ++i) {
    if (i > 0) x = F::conv1d(x, convs_[i]->weight, F::Conv1dFuncOptions().padding(1));
    x = F::gelu(MaskedGroupNorm(x, keep, norms_[i])).masked_fill(drop, 0);
  }
  return x.transpose(1, 2);
}

// ---------------------------------------------------------------------------------------------

TaylorShiftEncoderImpl::TaylorShiftEncoderImpl(const TaylorShiftEncoderOptions& options)
    : options_(options) {
  if (auto status = ValidateEncoderOptions(options_); !status.ok()) {
    TORCH_CHECK_VALUE(false, "invalid encoder options: ", status.message());
  }
  options_.mlp_hidden(ResolvedMlpHidden(options_));
  reset();
}

void TaylorShiftEncoderImpl::reset() {
  const std::int64_t dim = options_.embed_dim();
  if (options_.conv_embed()) {
    patch_embed_conv = register_module("patch_embed", TextConvEmbed(options_.vocab_size(), dim));
  } else {
    patch_embed = register_module("patch_embed", torch::nn::Linear(options_.vocab_size(), dim));
  }
  cls_token = register_parameter("cls_token", torch::zeros({1, 1, dim}));
  pe = register_buffer("pe", SinusoidalPositions(options_.max_length(), dim));
  pos_drop_ = register_module("pos_drop", torch::nn::Dropout(options_.drop_rate()));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options_.depth(); ++i) {
    const double drop_path = options_.depth() > 1 ? options_.drop_path() * static_cast<double>(i) /
                                                        static_cast<double>(options_.depth() - 1)
                                                  : 0.0;
    const auto attention = TaylorShiftAttentionOptions(dim, options_.heads())
                               .qkv_bias(options_.qkv_bias())
                               .input_normalize(options_.input_normalize())
                               .output_normalize(options_.output_normalize())
                               .a(options_.a())
                               .b(options_.b())
                               .c(options_.c())
                               .attn_drop(options_.attn_drop())
                               .crossover_tokens(options_.crossover_tokens());
    block_list_.emplace_back(attention, options_.mlp_hidden(), drop_path);
    blocks->push_back(block_list_.back());
  }
  norm = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps)));
  head = register_module("head", torch::nn::Linear(dim, options_.num_classes()));
  reset_parameters();
}

void TaylorShiftEncoderImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::LinearImpl>()) {
      // LibTorch's own default (Kaiming-uniform, bound 1/√fan_in): at the widths of byte-level
      // models (C 32-512) it is 1.3-3.6× ViT's 0.02, and it learned faster in our measurements.
      linear->reset_parameters();
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* layer_norm = module->as<torch::nn::LayerNormImpl>()) {
      layer_norm->reset_parameters();  // weight 1, bias 0
    } else if (auto* group_norm = module->as<torch::nn::GroupNormImpl>()) {
      group_norm->reset_parameters();  // weight 1, bias 0
    } else if (auto* conv = module->as<torch::nn::Conv1dImpl>()) {
      conv->reset_parameters();
    } else if (auto* attention = module->as<TaylorShiftAttentionImpl>()) {
      if (attention->temperature.defined()) attention->temperature.fill_(1.0);
    }
  }
  // The linear token embedding is a lookup table: N(0, 1) per entry (nn.Embedding's init), so a
  // token's vector (RMS 1) outweighs its sin/cos position (RMS 1/√2) instead of drowning in it
  // as ViT's 0.02 does (RMS 0.02 against 0.71: the first LayerNorm then sees positions only).
  if (!patch_embed.is_empty()) patch_embed->weight.normal_(0.0, kTokenEmbeddingInitStd);
  cls_token.normal_(0.0, kClsTokenInitStd);
}

torch::Tensor TaylorShiftEncoderImpl::Embed(const torch::Tensor& tokens,
                                            const torch::Tensor& valid) {
  // Linear on one-hot tokens = the token's column of the weight, plus the bias.
  // The [V, C] copy is small next to the batch and makes the gather contiguous.
  const auto x =
      options_.conv_embed()
          ? patch_embed_conv(tokens, valid)
          : torch::embedding(patch_embed->weight.t().contiguous(), tokens) + patch_embed->bias;
  const auto cls = cls_token.expand({tokens.size(0), 1, options_.embed_dim()});
  return torch::cat({cls, x + pe.narrow(1, 0, tokens.size(1))}, 1);
}

std::pair<torch::Tensor, torch::Tensor> TaylorShiftEncoderImpl::CheckInputs(
    const torch::Tensor& tokens, const torch::Tensor& lengths) const {
  TORCH_CHECK_VALUE(tokens.dim() == 2, "tokens must be [batch, length], got ", tokens.sizes());
  TORCH_CHECK_TYPE(
      !tokens.is_floating_point() && !tokens.is_complex() && tokens.scalar_type() != torch::kBool,
      "tokens must be integer ids, got ", tokens.scalar_type());
  const std::int64_t batch = tokens.size(0);
  const std::int64_t length = tokens.size(1);
  TORCH_CHECK_VALUE(length <= options_.max_length(), "sequence of ", length,
                    " tokens exceeds max_length ", options_.max_length());
  const auto device = pe.device();
  auto ids = tokens.to(device, torch::kLong);
  auto lens =
      lengths.defined()
          ? lengths.to(device, torch::kLong)
          : torch::full({batch}, length, torch::TensorOptions().dtype(torch::kLong).device(device));
  TORCH_CHECK_VALUE(lens.dim() == 1 && lens.size(0) == batch, "lengths must be [batch] = [", batch,
                    "], got ", lens.sizes());
  if (batch == 0) return {ids, lens};
  // The smallest and largest id and length in one copy from the device.
  std::vector<torch::Tensor> extremes = {lens.min(), lens.max()};
  if (length > 0) extremes.insert(extremes.end(), {ids.min(), ids.max()});
  const auto host = torch::stack(extremes).cpu();
  const auto* bound = host.data_ptr<std::int64_t>();
  TORCH_CHECK_VALUE(bound[0] >= 0 && bound[1] <= length, "lengths must be in [0, ", length,
                    "], got ", bound[0] < 0 ? bound[0] : bound[1]);
  TORCH_CHECK_VALUE(length == 0 || (bound[2] >= 0 && bound[3] < options_.vocab_size()),
                    "token ids must be in [0, ", options_.vocab_size(), "), got ",
                    bound[2] < 0 ? bound[2] : bound[3]);
  return {ids, lens};
}

torch::Tensor TaylorShiftEncoderImpl::forward(const torch::Tensor& tokens,
                                              const torch::Tensor& lengths, AttentionPath path) {
  // Without a hook nothing stops the pass.
  return *ForwardUnlessStopped(tokens, lengths, path, StopCheck());
}

absl::StatusOr<torch::Tensor> TaylorShiftEncoderImpl::ForwardUnlessStopped(
    const torch::Tensor& tokens, const torch::Tensor& lengths, AttentionPath path,
    const StopCheck& stop) {
  const auto [ids, lens] = CheckInputs(tokens, lengths);
  const std::int64_t batch = tokens.size(0);
  const std::int64_t length = tokens.size(1);
  const auto positions = torch::arange(length, lens.options()).unsqueeze(0);
  const auto valid = positions < lens.unsqueeze(1);  // [B, N]

  auto x = pos_drop_(Embed(ids, valid));

  // Padded keys are excluded; without padding the mask is left out (nothing to exclude).
  torch::Tensor key_padding_mask;
  if (batch > 0 && lens.min().item<std::int64_t>() < length) {
    key_padding_mask =
        torch::cat({torch::zeros({batch, 1}, valid.options()), valid.logical_not()}, 1);
  }
  const AttentionPath resolved = ResolvePath(path, length + 1, batch);
  for (auto& block : block_list_) {
    TS_RETURN_IF_ERROR(CheckStop(stop));
    x = block(x, key_padding_mask, resolved);
  }
  // LayerNorm works row by row: normalising the class token alone gives what the head reads.
  return head(norm(x.select(1, 0)));
}

AttentionPath TaylorShiftEncoderImpl::ResolvePath(AttentionPath path, std::int64_t tokens,
                                                  std::int64_t batch) const {
  return ResolveAuto(path, tokens, crossover_tokens(batch));
}

std::int64_t TaylorShiftEncoderImpl::crossover_tokens(std::int64_t batch) const {
  return crossover_table_.For(batch).value_or(crossover_tokens());
}

void TaylorShiftEncoderImpl::set_crossover_tokens(std::int64_t tokens) {
  TORCH_CHECK_VALUE(tokens >= 0, "crossover_tokens must be >= 0, got ", tokens);
  options_.crossover_tokens(tokens);
  for (auto& block : block_list_) block->attn->set_crossover_tokens(tokens);
}

std::int64_t TaylorShiftEncoderImpl::crossover_tokens() const {
  return block_list_.front()->attn->crossover_tokens();
}

void TaylorShiftEncoderImpl::set_precision(Precision precision) {
  torch::NoGradGuard no_grad;
  for (auto& block : block_list_) {
    block->attn->set_precision(precision);
    block->mlp->set_precision(precision);
  }
  precision_ = precision;
}

void TaylorShiftEncoderImpl::set_kernel_implementation(KernelImplementation implementation) {
  for (auto& block : block_list_) block->attn->set_kernel_implementation(implementation);
}

void TaylorShiftEncoderImpl::set_efficient_tiles(bool on) {
  for (auto& block : block_list_) block->attn->set_efficient_tiles(on);
}

std::int64_t TaylorShiftEncoderImpl::CountParameters() const {
  std::int64_t count = 0;
  for (const auto& parameter : parameters()) count += parameter.numel();
  return count;
}

}  // namespace ts
