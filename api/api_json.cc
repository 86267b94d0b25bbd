#include "api/api_json.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/time/time.h"
#include "api/proto_names.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"

namespace ts {
namespace {

namespace pb = google::protobuf;

using taylorshift::v1::ClassifyResponse;
using taylorshift::v1::ModelInfo;

Json ScalarJson(const pb::Message& message, const pb::FieldDescriptor& field, int index,
                bool all_fields) {
  const pb::Reflection& reflection = *message.GetReflection();
  // The field's value, or its element `index` when it is repeated.
  const auto get = [&](auto single, auto element) {
    return field.is_repeated() ? (reflection.*element)(message, &field, index)
                               : (reflection.*single)(message, &field);
  };
  using R = pb::Reflection;
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return get(&R::GetInt32, &R::GetRepeatedInt32);
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return get(&R::GetInt64, &R::GetRepeatedInt64);
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return get(&R::GetUInt32, &R::GetRepeatedUInt32);
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return get(&R::GetUInt64, &R::GetRepeatedUInt64);
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return JsonNumber(get(&R::GetDouble, &R::GetRepeatedDouble));
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return JsonFloat(get(&R::GetFloat, &R::GetRepeatedFloat));
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return get(&R::GetBool, &R::GetRepeatedBool);
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return get(&R::GetString, &R::GetRepeatedString);
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const int number = get(&R::GetEnumValue, &R::GetRepeatedEnumValue);
      const std::string name = EnumValueName(*field.enum_type(), number);
      if (name.empty()) return number;
      return absl::AsciiStrToLower(name);
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageJson(field.is_repeated() ? reflection.GetRepeatedMessage(message, &field, index)
                                             : reflection.GetMessage(message, &field),
                         all_fields);
  }
  return nullptr;
}

}  // namespace

Json MessageJson(const pb::Message& message, bool all_fields) {
  if (message.GetDescriptor() == pb::Timestamp::descriptor()) {
    pb::Timestamp time;
    time.CopyFrom(message);
    if (time.seconds() == 0 && time.nanos() == 0) return nullptr;
    const absl::Time t = absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
    return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", t, absl::UTCTimeZone());
  }
  std::vector<const pb::FieldDescriptor*> fields;
  if (all_fields) {
    for (int i = 0; i < message.GetDescriptor()->field_count(); ++i) {
      fields.push_back(message.GetDescriptor()->field(i));
    }
  } else {
    message.GetReflection()->ListFields(message, &fields);
  }
  Json object = Json::object();
  for (const pb::FieldDescriptor* field : fields) {
    Json& value = object[field->name()];
    if (field->is_repeated()) {
      value = Json::array();
      const int size = message.GetReflection()->FieldSize(message, field);
      for (int i = 0; i < size; ++i) value.push_back(ScalarJson(message, *field, i, all_fields));
    } else {
      value = ScalarJson(message, *field, -1, all_fields);
    }
  }
  return object;
}

Json ModelInfoJson(const ModelInfo& model) {
  Json object = MessageJson(model, /*all_fields=*/true);
  object.erase("crossovers");
  return object;
}

void AddClassifyFields(Json& object, const ClassifyResponse& response, double latency_ms) {
  std::vector<ClassProbability> probabilities;
  for (const auto& entry : response.probabilities()) {
    probabilities.push_back({entry.label(), entry.index(), entry.probability()});
  }
  object["label"] = response.label();
  object["probabilities"] = ProbabilitiesJson(probabilities);
  object["path"] = PathName(response.path());
  object["batch_size"] = response.timing().batch_size();
  object["batch_tokens"] = response.timing().batch_tokens();
  object["model_version"] = response.model_version();
  object["tokens"] = response.tokens();
  object["truncated"] = response.truncated();
  object["windows"] = response.windows();
  object["queue_ms"] = JsonMilliseconds(response.timing().queue_seconds() * 1e3);
  object["compute_ms"] = JsonMilliseconds(response.timing().compute_seconds() * 1e3);
  object["latency_ms"] = JsonMilliseconds(latency_ms);
  object["request_id"] = response.request_id();
}

}  // namespace ts
