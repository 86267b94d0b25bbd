// The JSON forms of API results that more than one front end prints: tsctl (--json) and the
// server's HTTP route (/v1/models..., docs/PROTOCOLS.md) write the same objects.
//
// Model: {"name":"imdb","version":"v3","modality":"bytes","labels":["neg","pos"],
//   "max_length":4096,"embed_dim":64,"depth":2,"heads":4,"head_dim":16,"crossover_tokens":1100,
//   "crossover_source":"calibration","over_length_policy":"truncate","device":"cuda:0",
//   "precision":"fp32"}
// Classify result fields (inside an object; tsctl puts "file" first):
//   "label":"pos","probabilities":[{"label":"neg","index":0,"probability":0.08},...],
//   "path":"efficient","batch_size":4,"batch_tokens":2052,"model_version":"v3","tokens":513,
//   "truncated":false,"windows":1,"queue_ms":1.2,"compute_ms":3.4,"latency_ms":5.9,
//   "request_id":"tsctl-0"
// `probabilities` is common/json_output.h's ProbabilitiesJson, the schema tsmodel predict
// prints too.
#pragma once

#include "common/json_output.h"
#include "google/protobuf/message.h"
#include "taylorshift/v1/classifier.pb.h"

namespace ts {

// A message as a JSON object with its proto field names, in field order: doubles as JsonNumber,
// floats as JsonFloat, enums in lower case without their prefix ("auto"), Timestamps as
// RFC 3339 strings in UTC (null when unset; a Timestamp given itself is that string), other
// messages as objects. Only the set fields, or with `all_fields` every field (unset ones with
// their defaults), for objects of a fixed shape.
Json MessageJson(const google::protobuf::Message& message, bool all_fields = false);

// The model's fields but `crossovers`.
Json ModelInfoJson(const taylorshift::v1::ModelInfo& model);
// Appends the classify result's fields to `object`.
void AddClassifyFields(Json& object, const taylorshift::v1::ClassifyResponse& response,
                       double latency_ms);

}  // namespace ts
