// The YAML form of job specs (taylorshift/v1/jobs.proto) that users write for `tsctl train/eval
// --spec`: parsed into the proto as written — no defaults filled, no limits checked (that is
// the server's normalisation, job_contract/job_spec.h). Torch-free and server-free, so tsctl and
// tsworker parse specs without linking either.
//
// YAML keys are the proto field names, nested as in the proto (`model: {embed_dim: 64}`,
// `data: {train: {format: jsonl, path: train.jsonl}}`); enum values are their names in lower
// case without the enum's prefix (`path: auto|direct|efficient|softmax`; the full proto name is
// accepted too); repeated fields (`labels`) are lists of strings. An evaluation spec's `data`
// is a single data source.
//
// Errors are INVALID_ARGUMENT whose message starts with the key path, e.g.
// `optimizer.foo: unknown key (expected one of name, ...)` or `model.heads: expected a
// non-negative integer, got "x" (line 3)`. Unknown and duplicate keys, wrong types (a string
// where a number goes, a negative or fractional number where an unsigned integer goes, a
// non-finite number), two fields of one oneof, and malformed YAML ("invalid YAML: ...") are
// errors. An empty value (`key:`) is the same as leaving the key out. Stateless and
// thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "taylorshift/v1/jobs.pb.h"

namespace ts {

absl::StatusOr<taylorshift::v1::TrainingSpec> ParseTrainingSpecYaml(const std::string& yaml_text);
absl::StatusOr<taylorshift::v1::EvaluationSpec> ParseEvaluationSpecYaml(
    const std::string& yaml_text);

}  // namespace ts
