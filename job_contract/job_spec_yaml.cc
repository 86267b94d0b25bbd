#include "job_contract/job_spec_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/proto_names.h"
#include "common/status_macros.h"
#include "common/yaml_fields.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace ts {
namespace {

namespace pb = google::protobuf;

using taylorshift::v1::EvaluationSpec;
using taylorshift::v1::TrainingSpec;
using yaml_fields::Fields;
using yaml_fields::KindOf;
using yaml_fields::NodeError;
using yaml_fields::ReadBool;
using yaml_fields::ReadInt64;
using yaml_fields::ReadMap;
using yaml_fields::ReadScalar;

// YAML → proto by reflection: the keys are the proto's field names, so the YAML form follows
// the API without a second list of fields to keep in step.

absl::Status ReadMessage(const YAML::Node& node, const std::string& path, pb::Message* message);

absl::Status ReadUnsigned(const YAML::Node& node, const std::string& path, std::uint64_t max,
                          std::uint64_t* out) {
  const bool digits = node.IsScalar() && !node.Scalar().empty() &&
                      std::all_of(node.Scalar().begin(), node.Scalar().end(), [](char c) {
                        return absl::ascii_isdigit(static_cast<unsigned char>(c));
                      });
  std::uint64_t value = 0;
  if (!digits) {
    return NodeError(node, path,
                     absl::StrCat("expected a non-negative integer, got ", KindOf(node)));
  }
  if (!absl::SimpleAtoi(node.Scalar(), &value) || value > max) {
    return NodeError(node, path, absl::StrCat("must be at most ", max, ", got ", node.Scalar()));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadDouble(const YAML::Node& node, const std::string& path, double* out) {
  double value = 0;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &value)) {
    return NodeError(node, path, absl::StrCat("expected a number, got ", KindOf(node)));
  }
  if (!std::isfinite(value)) {
    return NodeError(node, path, absl::StrCat("expected a finite number, got ", KindOf(node)));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadEnum(const YAML::Node& node, const std::string& path,
                      const pb::EnumDescriptor& type, int* out) {
  std::string text;
  TS_RETURN_IF_ERROR(ReadScalar(node, path, &text));
  const std::string lower = absl::AsciiStrToLower(text);
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    const pb::EnumValueDescriptor& value = *type.value(i);
    if (absl::EndsWith(value.name(), "_UNSPECIFIED")) continue;
    // Lower case without the enum's prefix ("auto" for ATTENTION_PATH_AUTO).
    const std::string name = absl::AsciiStrToLower(EnumValueName(type, value.number()));
    if (lower == name || lower == absl::AsciiStrToLower(value.name())) {
      *out = value.number();
      return absl::OkStatus();
    }
    names.push_back(name);
  }
  return NodeError(
      node, path,
      absl::StrCat("must be one of ", absl::StrJoin(names, ", "), "; got ", KindOf(node)));
}

// One field's value into `message`.
absl::Status ReadField(const YAML::Node& node, const std::string& path,
                       const pb::FieldDescriptor& field, pb::Message* message) {
  const pb::Reflection& reflection = *message->GetReflection();
  if (const pb::OneofDescriptor* oneof = field.real_containing_oneof(); oneof != nullptr) {
    const pb::FieldDescriptor* set = reflection.GetOneofFieldDescriptor(*message, oneof);
    if (set != nullptr && set != &field) {
      std::vector<std::string> names;
      names.reserve(oneof->field_count());
      for (int i = 0; i < oneof->field_count(); ++i) names.push_back(oneof->field(i)->name());
      return NodeError(node, path,
                       absl::StrCat("conflicts with ", set->name(), " (give only one of ",
                                    absl::StrJoin(names, ", "), ")"));
    }
  }
  if (field.is_repeated()) {
    if (field.cpp_type() != pb::FieldDescriptor::CPPTYPE_STRING) {
      return absl::InternalError(absl::StrCat(path, ": repeated ", field.type_name(),
                                              " fields are not readable from YAML"));
    }
    if (!node.IsSequence()) {
      return NodeError(node, path, absl::StrCat("expected a list of strings, got ", KindOf(node)));
    }
    reflection.ClearField(message, &field);
    for (std::size_t i = 0; i < node.size(); ++i) {
      std::string value;
      TS_RETURN_IF_ERROR(ReadScalar(node[i], absl::StrCat(path, "[", i, "]"), &value));
      reflection.AddString(message, &field, std::move(value));
    }
    return absl::OkStatus();
  }
  absl::Status status;
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return ReadMessage(node, path, reflection.MutableMessage(message, &field));
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      std::string value;
      status = ReadScalar(node, path, &value);
      if (status.ok()) reflection.SetString(message, &field, std::move(value));
      return status;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool value = false;
      status = ReadBool(node, path, &value);
      if (status.ok()) reflection.SetBool(message, &field, value);
      return status;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      std::uint64_t value = 0;
      status = ReadUnsigned(node, path, std::numeric_limits<std::uint32_t>::max(), &value);
      if (status.ok()) reflection.SetUInt32(message, &field, static_cast<std::uint32_t>(value));
      return status;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      std::uint64_t value = 0;
      status = ReadUnsigned(node, path, std::numeric_limits<std::uint64_t>::max(), &value);
      if (status.ok()) reflection.SetUInt64(message, &field, value);
      return status;
    }
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      std::int64_t value = 0;
      TS_RETURN_IF_ERROR(ReadInt64(node, path, &value));
      if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_INT64) {
        reflection.SetInt64(message, &field, value);
      } else if (value < std::numeric_limits<std::int32_t>::min() ||
                 value > std::numeric_limits<std::int32_t>::max()) {
        return NodeError(node, path, absl::StrCat("out of range, got ", value));
      } else {
        reflection.SetInt32(message, &field, static_cast<std::int32_t>(value));
      }
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      double value = 0;
      TS_RETURN_IF_ERROR(ReadDouble(node, path, &value));
      if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
        reflection.SetDouble(message, &field, value);
      } else {
        reflection.SetFloat(message, &field, static_cast<float>(value));
      }
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      int value = 0;
      status = ReadEnum(node, path, *field.enum_type(), &value);
      if (status.ok()) reflection.SetEnumValue(message, &field, value);
      return status;
    }
  }
  return absl::InternalError(absl::StrCat(path, ": unsupported field type"));
}

absl::Status ReadMessage(const YAML::Node& node, const std::string& path, pb::Message* message) {
  const pb::Descriptor& descriptor = *message->GetDescriptor();
  Fields fields;
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor.field(i);
    fields.emplace_back(field->name(),
                        [field, message](const YAML::Node& value, const std::string& at) {
                          return ReadField(value, at, *field, message);
                        });
  }
  return ReadMap(node, path, fields);
}

template <typename Spec>
absl::StatusOr<Spec> ParseSpecYaml(const std::string& yaml_text) {
  Spec spec;
  TS_RETURN_IF_ERROR(yaml_fields::ReadDocument(
      yaml_text, [&spec](const YAML::Node& root) { return ReadMessage(root, "", &spec); }));
  return spec;
}

}  // namespace

absl::StatusOr<TrainingSpec> ParseTrainingSpecYaml(const std::string& yaml_text) {
  return ParseSpecYaml<TrainingSpec>(yaml_text);
}

absl::StatusOr<EvaluationSpec> ParseEvaluationSpecYaml(const std::string& yaml_text) {
  return ParseSpecYaml<EvaluationSpec>(yaml_text);
}

}  // namespace ts
