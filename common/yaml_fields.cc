#include "common/yaml_fields.h"

#include <algorithm>
#include <climits>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ts::yaml_fields {

absl::Status ReadDocument(const std::string& yaml_text,
                          const std::function<absl::Status(const YAML::Node& root)>& read) {
  try {
    return read(YAML::Load(yaml_text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.what()));
  }
}

absl::Status NodeError(const YAML::Node& node, const std::string& path, const std::string& why) {
  const YAML::Mark mark = node.Mark();  // null for a node that did not come from a document
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": ", why, mark.is_null() ? "" : absl::StrCat(" (line ", mark.line + 1, ")")));
}

std::string KindOf(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Scalar:
      return absl::StrCat("\"", node.Scalar(), "\"");
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string ChildPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : absl::StrCat(parent, ".", key);
}

absl::Status ReadMap(const YAML::Node& node, const std::string& path, const Fields& fields) {
  if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return NodeError(node, path.empty() ? "(top level)" : path,
                     absl::StrCat("expected a mapping, got ", KindOf(node)));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key_node = it->first;  // a handle; it-> yields a temporary
    if (!key_node.IsScalar()) {
      return NodeError(key_node, path.empty() ? "(top level)" : path, "keys must be plain strings");
    }
    const std::string& key = key_node.Scalar();
    const std::string key_path = ChildPath(path, key);
    const auto field = std::find_if(fields.begin(), fields.end(),
                                    [&](const auto& entry) { return entry.first == key; });
    if (field == fields.end()) {
      std::vector<std::string> expected;
      for (const auto& entry : fields) expected.push_back(entry.first);
      return NodeError(
          key_node, key_path,
          absl::StrCat("unknown key (expected one of ", absl::StrJoin(expected, ", "), ")"));
    }
    if (!seen.insert(key).second) return NodeError(key_node, key_path, "duplicate key");
    const YAML::Node value = it->second;
    if (value.IsNull()) continue;
    TS_RETURN_IF_ERROR(field->second(value, key_path));
  }
  return absl::OkStatus();
}

absl::Status ReadScalar(const YAML::Node& node, const std::string& path, std::string* out) {
  if (!node.IsScalar()) {
    return NodeError(node, path, absl::StrCat("expected a string, got ", KindOf(node)));
  }
  *out = node.Scalar();
  return absl::OkStatus();
}

absl::Status ReadInt64(const YAML::Node& node, const std::string& path, std::int64_t* out) {
  std::int64_t value = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &value)) {
    return NodeError(node, path, absl::StrCat("expected an integer, got ", KindOf(node)));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadBool(const YAML::Node& node, const std::string& path, bool* out) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return NodeError(node, path, absl::StrCat("expected true or false, got ", KindOf(node)));
  }
  *out = value;
  return absl::OkStatus();
}

namespace {

template <typename T>
FieldReader Reader(T* out, absl::Status (*read)(const YAML::Node&, const std::string&, T*)) {
  return [out, read](const YAML::Node& node, const std::string& path) {
    return read(node, path, out);
  };
}

absl::Status ReadInt(const YAML::Node& node, const std::string& path, int* out) {
  std::int64_t value = 0;
  TS_RETURN_IF_ERROR(ReadInt64(node, path, &value));
  if (value < INT_MIN || value > INT_MAX) {
    return NodeError(node, path, absl::StrCat("out of range, got ", value));
  }
  *out = static_cast<int>(value);
  return absl::OkStatus();
}

}  // namespace

FieldReader String(std::string* out) { return Reader(out, ReadScalar); }
FieldReader Int64(std::int64_t* out) { return Reader(out, ReadInt64); }
FieldReader Int(int* out) { return Reader(out, ReadInt); }
FieldReader Bool(bool* out) { return Reader(out, ReadBool); }

FieldReader Map(Fields fields) {
  return [fields = std::move(fields)](const YAML::Node& node, const std::string& path) {
    return ReadMap(node, path, fields);
  };
}

}  // namespace ts::yaml_fields
