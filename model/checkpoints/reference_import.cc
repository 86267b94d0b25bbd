#include "model/checkpoints/reference_import.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "model/torch_status.h"

namespace ts {
namespace {

// The tensor `key` with `dims` dimensions; `expected` describes its shape for messages.
absl::StatusOr<torch::Tensor> RequireTensor(const std::map<std::string, torch::Tensor>& state,
                                            const std::string& key, std::int64_t dims,
                                            absl::string_view expected) {
  const auto it = state.find(key);
  if (it == state.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference state dict is missing ", key, " (expected shape ", expected, ")"));
  }
  if (it->second.dim() != dims) {
    return absl::InvalidArgumentError(absl::StrCat("reference state dict entry ", key,
                                                   " has shape ", c10::str(it->second.sizes()),
                                                   ", expected ", expected));
  }
  return it->second;
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadStateDict(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path, "reference state dict"));

  auto loaded = CatchTorch(absl::StrCat("cannot unpickle ", path), [&] {
    return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  });
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        loaded.status().message(),
        " (expected a file written by torch.save(dict(model.state_dict()), path); LibTorch "
        "cannot read the OrderedDict that torch.save(model.state_dict()) writes)"));
  }
  if (!loaded->isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds a ", loaded->tagKind(),
                                                   ", expected a dict of tensors written by "
                                                   "torch.save(dict(model.state_dict()), path)"));
  }
  std::map<std::string, torch::Tensor> state;
  for (const auto& entry : loaded->toGenericDict()) {
    if (!entry.key().isString()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " has a non-string key"));
    }
    if (!entry.value().isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": entry ", entry.key().toStringRef(),
                                                     " is a ", entry.value().tagKind(),
                                                     ", expected a tensor"));
    }
    state.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return state;
}

// The architecture (options) the reference state dict describes.
absl::StatusOr<TaylorShiftEncoderOptions> InferReferenceArchitecture(
    const std::map<std::string, torch::Tensor>& state, const ReferenceImportOptions& options) {
  // Depth: one more than the largest N of "blocks.N.*".
  std::int64_t depth = 0;
  for (const auto& [name, tensor] : state) {
    if (!absl::StartsWith(name, "blocks.")) continue;
    const absl::string_view rest = absl::string_view(name).substr(7);
    std::int64_t index = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &index) && index >= 0) {
      depth = std::max(depth, index + 1);
    }
  }
  if (depth == 0) {
    return absl::InvalidArgumentError(
        "reference state dict has no blocks.0.* tensors (expected blocks.{i}.attn, .mlp, ...)");
  }

  const bool conv_embed = state.count("patch_embed.proj.0.weight") > 0;
  std::int64_t embed_dim = 0;
  std::int64_t vocab_size = 0;
  if (conv_embed) {
    TS_ASSIGN_OR_RETURN(const torch::Tensor first,
                        RequireTensor(state, "patch_embed.proj.0.weight", 3, "[C/4, V, 3]"));
    TS_ASSIGN_OR_RETURN(const torch::Tensor last,
                        RequireTensor(state, "patch_embed.proj.6.weight", 3, "[C, C/2, 3]"));
    embed_dim = last.size(0);
    vocab_size = first.size(1);
  } else {
    TS_ASSIGN_OR_RETURN(const torch::Tensor weight,
                        RequireTensor(state, "patch_embed.weight", 2, "[C, V]"));
    embed_dim = weight.size(0);
    vocab_size = weight.size(1);
  }
  const std::string c_text = absl::StrCat(embed_dim);

  std::int64_t heads = options.heads;
  const bool input_normalize = state.count("blocks.0.attn.temperature") > 0;
  if (input_normalize) {
    TS_ASSIGN_OR_RETURN(const torch::Tensor temperature,
                        RequireTensor(state, "blocks.0.attn.temperature", 4, "[1, H, 1, 1]"));
    const std::int64_t inferred = temperature.size(1);
    if (heads != 0 && heads != inferred) {
      return absl::InvalidArgumentError(
          absl::StrCat("heads ", heads, " was given but blocks.0.attn.temperature ",
                       c10::str(temperature.sizes()), " says ", inferred));
    }
    heads = inferred;
  } else if (heads <= 0) {
    return absl::InvalidArgumentError(
        "reference state dict has no blocks.0.attn.temperature (trained without input "
        "normalisation), so the number of heads must be given explicitly");
  }

  TS_ASSIGN_OR_RETURN(const torch::Tensor fc1, RequireTensor(state, "blocks.0.mlp.fc1.weight", 2,
                                                             absl::StrCat("[L, ", c_text, "]")));
  TS_ASSIGN_OR_RETURN(const torch::Tensor head,
                      RequireTensor(state, "head.weight", 2, absl::StrCat("[K, ", c_text, "]")));
  TS_ASSIGN_OR_RETURN(const torch::Tensor pe,
                      RequireTensor(state, "pe", 3, absl::StrCat("[1, max_len, ", c_text, "]")));
  const bool qkv_bias = state.count("blocks.0.attn.qkv.bias") > 0;

  TaylorShiftEncoderOptions inferred(embed_dim, depth, heads, pe.size(1), head.size(0));
  inferred.vocab_size(vocab_size)
      .mlp_hidden(fc1.size(0))
      .qkv_bias(qkv_bias)
      .conv_embed(conv_embed)
      .input_normalize(input_normalize)
      .output_normalize(options.output_normalize)
      .a(options.a)
      .b(options.b)
      .c(options.c);
  if (auto status = ValidateEncoderOptions(inferred); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference state dict describes an invalid model (",
                     DescribeEncoderOptions(inferred), "): ", status.message()));
  }
  return inferred;
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> ImportReferenceState(
    const std::map<std::string, torch::Tensor>& state, const ReferenceImportOptions& options) {
  TS_ASSIGN_OR_RETURN(const TaylorShiftEncoderOptions architecture,
                      InferReferenceArchitecture(state, options));

  CheckpointMetadata metadata;
  metadata.modality = options.modality;
  metadata.labels = options.labels;
  if (metadata.labels.empty()) {
    for (std::int64_t i = 0; i < architecture.num_classes(); ++i) {
      metadata.labels.push_back(absl::StrCat(i));
    }
  }
  TS_RETURN_IF_ERROR(ValidateCheckpointMetadata(metadata, architecture.num_classes()));
  metadata.provenance = options.provenance;
  metadata.provenance.try_emplace("format", "reference state dict (tobna/TaylorShift)");

  TS_ASSIGN_OR_RETURN(
      auto model, CatchTorch("building model", [&] { return TaylorShiftEncoder(architecture); }));
  TS_RETURN_IF_ERROR(Prefixed(LoadStateDict(state, model), "reference "));
  model->eval();
  return LoadedCheckpoint{architecture, std::move(metadata), std::move(model)};
}

absl::StatusOr<LoadedCheckpoint> ImportReferenceStateDict(const std::string& path,
                                                          const ReferenceImportOptions& options) {
  TS_ASSIGN_OR_RETURN(const auto state, ReadStateDict(path));
  ReferenceImportOptions with_source = options;
  with_source.provenance.try_emplace("source", path);
  return Prefixed(ImportReferenceState(state, with_source), path + ": ");
}

}  // namespace ts
