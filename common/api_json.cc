#include "common/api_json.h"

#include "common/json_number.h"
#include "common/proto_names.h"

namespace ts {

using taylorshift::v1::ClassifyResponse;
using taylorshift::v1::ModelInfo;

void WriteModelJson(JsonWriter& json, const ModelInfo& model) {
  json.BeginObject();
  json.Key("name").String(model.name());
  json.Key("version").String(model.version());
  json.Key("modality").String(model.modality());
  json.Key("labels").BeginArray();
  for (const std::string& label : model.labels()) json.String(label);
  json.EndArray();
  json.Key("max_length").Int(model.max_length());
  json.Key("embed_dim").Int(model.embed_dim());
  json.Key("depth").Int(model.depth());
  json.Key("heads").Int(model.heads());
  json.Key("head_dim").Int(model.head_dim());
  json.Key("crossover_tokens").Int(model.crossover_tokens());
  json.Key("crossover_source").String(model.crossover_source());
  json.Key("over_length_policy").String(model.over_length_policy());
  json.Key("device").String(model.device());
  json.Key("precision").String(model.precision());
  json.EndObject();
}

void WriteClassifyFields(JsonWriter& json, const ClassifyResponse& response, double latency_ms) {
  json.Key("label").String(response.label());
  json.Key("probabilities").BeginArray();
  for (const auto& entry : response.probabilities()) {
    json.BeginObject();
    json.Key("label").String(entry.label());
    json.Key("index").Int(entry.index());
    WriteFloat(json.Key("probability"), entry.probability());
    json.EndObject();
  }
  json.EndArray();
  json.Key("path").String(PathName(response.path()));
  json.Key("batch_size").Int(response.timing().batch_size());
  json.Key("batch_tokens").Int(response.timing().batch_tokens());
  json.Key("model_version").String(response.model_version());
  json.Key("tokens").Int(response.tokens());
  json.Key("truncated").Bool(response.truncated());
  json.Key("windows").Int(response.windows());
  WriteMilliseconds(json.Key("queue_ms"), response.timing().queue_seconds() * 1e3);
  WriteMilliseconds(json.Key("compute_ms"), response.timing().compute_seconds() * 1e3);
  WriteMilliseconds(json.Key("latency_ms"), latency_ms);
  json.Key("request_id").String(response.request_id());
}

}  // namespace ts
