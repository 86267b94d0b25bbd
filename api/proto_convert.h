// Conversions between the API's enums (taylorshift.v1, proto/) and the model's (model/): the one
// place that maps one onto the other, for the inference core, the job specs and the workers.
// Torch-free; stateless and thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "model/api/attention_path.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts {

// The API's attention path → the model's; INVALID_ARGUMENT "path: ..." for a value the API does
// not define (a newer client's, or a number sent raw).
absl::StatusOr<AttentionPath> FromProtoPath(taylorshift::v1::AttentionPath path);

// The path a batch ran → the API's. The reference paths (tests and benchmarks only, never
// served) have no API value and come back as ATTENTION_PATH_AUTO.
taylorshift::v1::AttentionPath ToProtoPath(AttentionPath path);

}  // namespace ts
