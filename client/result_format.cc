#include "client/result_format.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/api_json.h"
#include "api/proto_names.h"

namespace ts::client {
namespace {

using taylorshift::v1::ClassifyResponse;
using taylorshift::v1::ModelInfo;

// The probability of the response's label, or -1 when the list does not carry it (a
// top_k list always starts with it, but do not rely on that).
double LabelProbability(const ClassifyResponse& response) {
  for (const auto& entry : response.probabilities()) {
    if (entry.label() == response.label()) return entry.probability();
  }
  return -1;
}

}  // namespace

std::string ModelJson(const ModelInfo& model) { return DumpJson(ModelInfoJson(model)); }

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return "";
  std::vector<std::size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string ModelTable(const taylorshift::v1::ListModelsResponse& models) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "VERSION", "MODALITY", "CLASSES",
                                                 "MAX_LEN", "DIM", "DEPTH", "HEADS", "D",
                                                 "CROSSOVER", "POLICY", "DEVICE", "PRECISION"}};
  for (const ModelInfo& model : models.models()) {
    rows.push_back({model.name(), model.version(), model.modality(),
                    absl::StrCat(model.labels_size()), absl::StrCat(model.max_length()),
                    absl::StrCat(model.embed_dim()), absl::StrCat(model.depth()),
                    absl::StrCat(model.heads()), absl::StrCat(model.head_dim()),
                    absl::StrCat(model.crossover_tokens(), " (", model.crossover_source(), ")"),
                    model.over_length_policy(), model.device(), model.precision()});
  }
  return FormatTable(rows);
}

std::string ModelDetails(const ModelInfo& model) {
  std::string out;
  const auto line = [&](absl::string_view key, const absl::AlphaNum& value) {
    absl::StrAppend(&out, key, ": ", value, "\n");
  };
  line("name", model.name());
  line("version", model.version());
  line("modality", model.modality());
  line("labels", absl::StrJoin(model.labels(), ", "));
  line("max_length", model.max_length());
  line("embed_dim", model.embed_dim());
  line("depth", model.depth());
  line("heads", model.heads());
  line("head_dim", model.head_dim());
  line("crossover_tokens", model.crossover_tokens());
  line("crossover_source", model.crossover_source());
  if (model.crossovers_size() > 0) {
    line("crossovers",
         absl::StrJoin(model.crossovers(), ", ", [](std::string* text, const auto& c) {
           absl::StrAppend(text, "batch ", c.batch(), ": ", c.tokens(), " tokens");
         }));
  }
  line("over_length_policy", model.over_length_policy());
  line("device", model.device());
  line("precision", model.precision());
  return out;
}

std::string ClassifyJson(const std::string& file, const ClassifyResponse& response,
                         double latency_ms) {
  Json object = {{"file", file}};
  AddClassifyFields(object, response, latency_ms);
  return DumpJson(object);
}

std::string ClassifyErrorJson(const std::string& file, const grpc::Status& status) {
  return DumpJson(
      Json{{"file", file},
           {"error",
            {{"code", GrpcCodeName(status.error_code())}, {"message", status.error_message()}}}});
}

std::string ClassifyText(const std::string& file, const ClassifyResponse& response,
                         double latency_ms, std::uint32_t top_k) {
  const double probability = LabelProbability(response);
  std::string out = absl::StrCat(file, ": ", response.label());
  if (probability >= 0) absl::StrAppendFormat(&out, " (p=%.3f)", probability);
  if (top_k > 0) {
    // The server answers the top_k best already; sort anyway, so the line reads best first
    // whatever order a server sends them in.
    std::vector<const taylorshift::v1::ClassProbability*> best;
    for (const auto& entry : response.probabilities()) best.push_back(&entry);
    std::stable_sort(best.begin(), best.end(), [](const auto* a, const auto* b) {
      return a->probability() > b->probability();
    });
    if (best.size() > top_k) best.resize(top_k);
    absl::StrAppend(&out, " top-", best.size(), ": ",
                    absl::StrJoin(best, ", ", [](std::string* text, const auto* entry) {
                      absl::StrAppendFormat(text, "%s %.3f", entry->label(), entry->probability());
                    }));
  }
  absl::StrAppendFormat(&out, " path=%s batch=%d tokens=%d", PathName(response.path()),
                        response.timing().batch_size(), response.tokens());
  if (response.windows() > 1) absl::StrAppend(&out, " windows=", response.windows());
  if (response.truncated()) out += " truncated";
  absl::StrAppendFormat(&out, " queue=%.2fms compute=%.2fms latency=%.2fms version=%s",
                        response.timing().queue_seconds() * 1e3,
                        response.timing().compute_seconds() * 1e3, latency_ms,
                        response.model_version());
  return out;
}

std::string ClassifyErrorText(const std::string& file, const grpc::Status& status) {
  return absl::StrCat(file, ": ", GrpcCodeName(status.error_code()), ": ", status.error_message());
}

std::string ServingStatusName(grpc::health::v1::HealthCheckResponse::ServingStatus status) {
  const std::string& name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status);
  return name.empty() ? absl::StrCat("STATUS_", static_cast<int>(status)) : name;
}

}  // namespace ts::client
