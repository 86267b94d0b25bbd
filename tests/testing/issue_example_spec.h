// The training spec of the jobs issue, verbatim: the YAML a user writes first. Shared by the
// spec reader's tests (tests/common) and the server-side normalisation's (tests/server).
#pragma once

namespace ts::testing {

constexpr char kIssueExample[] = R"yaml(
name: filetype
model: {embed_dim: 64, depth: 2, heads: 8, mlp_ratio: 2, max_length: 2048}
data:
  train: {format: jsonl, path: train.jsonl}
  validation: {format: jsonl, path: val.jsonl}     # or split: 0.1
optimizer: {name: adamw, lr: 0.001, weight_decay: 0.001, warmup_steps: 20}
batch_size: 16
steps: 300             # or epochs
seed: 1
)yaml";

// The issue's alternatives to it: a validation split instead of a file, epochs instead of steps.
constexpr char kIssueSplitAlternative[] = R"yaml(
name: filetype
model: {embed_dim: 64, depth: 2, heads: 8, max_length: 2048}
data:
  train: {format: jsonl, path: train.jsonl}
  validation: {split: 0.1}
epochs: 3
)yaml";

}  // namespace ts::testing
