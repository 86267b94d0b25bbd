// Reading YAML documents into Options structs and API messages (yaml-cpp): the one place that
// parses YAML, shared by the server configuration (server/config.cc) and the job specs
// (job_contract/job_spec_yaml.cc). Every mapping is read through ReadMap, which rejects unknown and
// duplicate keys, so each field has exactly one key and a typo never passes silently.
// Errors are INVALID_ARGUMENT "<key path>: <reason> (line N)", the key path written as
// "models[1].batching.max_batch_size". Stateless and thread-safe.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace ts::yaml_fields {

// Parses `yaml_text` and hands its root node to `read`. Malformed YAML, and any yaml-cpp error
// while `read` runs, is INVALID_ARGUMENT "invalid YAML: <what yaml-cpp says>".
absl::Status ReadDocument(const std::string& yaml_text,
                          const std::function<absl::Status(const YAML::Node& root)>& read);

// INVALID_ARGUMENT "<path>: <why> (line N)".
absl::Status NodeError(const YAML::Node& node, const std::string& path, const std::string& why);

// How an error message names what it found: "\"text\"", "a sequence", "a mapping", ...
std::string KindOf(const YAML::Node& node);

// "parent.key", or "key" at the top level.
std::string ChildPath(const std::string& parent, const std::string& key);

// A key's value handler. Empty values (`key:` with nothing after it) never reach a handler:
// they mean "use the default", exactly like leaving the key out.
using FieldReader = std::function<absl::Status(const YAML::Node& value, const std::string& path)>;
using Fields = std::vector<std::pair<std::string, FieldReader>>;

// Reads a mapping: each key goes to its handler in `fields`; an unknown key (the message lists
// the known ones), a duplicate key, a key that is not a plain string or a node that is not a
// mapping is an error. An absent or empty node is OK and reads nothing. `path` "" is the
// document's top level.
absl::Status ReadMap(const YAML::Node& node, const std::string& path, const Fields& fields);

absl::Status ReadScalar(const YAML::Node& node, const std::string& path, std::string* out);
absl::Status ReadInt64(const YAML::Node& node, const std::string& path, std::int64_t* out);
absl::Status ReadBool(const YAML::Node& node, const std::string& path, bool* out);

// Handlers that store into `out` (which must outlive the ReadMap call).
FieldReader String(std::string* out);
FieldReader Int64(std::int64_t* out);
FieldReader Int(int* out);
FieldReader Bool(bool* out);
// A nested mapping, read by ReadMap with `fields`.
FieldReader Map(Fields fields);

}  // namespace ts::yaml_fields
