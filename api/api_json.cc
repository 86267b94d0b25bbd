#include "api/api_json.h"

#include <vector>

#include "api/proto_names.h"

namespace ts {

using taylorshift::v1::ClassifyResponse;
using taylorshift::v1::ModelInfo;

Json ModelInfoJson(const ModelInfo& model) {
  return Json{{"name", model.name()},
              {"version", model.version()},
              {"modality", model.modality()},
              {"labels", std::vector<std::string>(model.labels().begin(), model.labels().end())},
              {"max_length", model.max_length()},
              {"embed_dim", model.embed_dim()},
              {"depth", model.depth()},
              {"heads", model.heads()},
              {"head_dim", model.head_dim()},
              {"crossover_tokens", model.crossover_tokens()},
              {"crossover_source", model.crossover_source()},
              {"over_length_policy", model.over_length_policy()},
              {"device", model.device()},
              {"precision", model.precision()}};
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
