#include "server/serving/inference_core.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/proto_convert.h"
#include "common/quoted.h"
#include "common/status_macros.h"
#include "job_contract/job_spec.h"
#include "model/networks/cost_model.h"
#include "server/serving/grpc_status.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;

constexpr char kClassifyRole[] = "classify";
constexpr char kAdminRole[] = "admin";

std::string RejectReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
      return "queue_full";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    case absl::StatusCode::kNotFound:
      return "unknown_model";
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return "unauthorized";
    case absl::StatusCode::kUnavailable:
      return "shutting_down";
    default:
      return "invalid_argument";
  }
}

// The request's input as tokens: a document's bytes, or an image's pixels for a model that
// takes them.
absl::StatusOr<std::string> InputTokens(const pb::ClassifyRequest& request,
                                        const ServedModel& model) {
  switch (request.input_case()) {
    case pb::ClassifyRequest::kDocument:
      return request.document();
    case pb::ClassifyRequest::kImage: {
      if (model.metadata().modality != "pixels") {
        return absl::InvalidArgumentError(absl::StrCat("image: model ", Quoted(model.name()),
                                                       " takes documents (modality ",
                                                       model.metadata().modality, ")"));
      }
      const auto& image = request.image();
      auto pixels = ImageToTokens(image.width(), image.height(), image.channels(), image.pixels());
      if (!pixels.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("image: ", pixels.status().message()));
      }
      return pixels;
    }
    default:
      return absl::InvalidArgumentError("input: set either document or image");
  }
}

// The input cut to the model's limits by its over-length policy, or by the request's own.
absl::StatusOr<PreparedInput> PrepareInput(const pb::ClassifyRequest& request,
                                           const ServedModel& model) {
  TS_ASSIGN_OR_RETURN(const std::string tokens, InputTokens(request, model));
  LengthPolicy over_length = model.config().over_length;
  if (!request.over_length().empty()) {
    auto parsed = ParseLengthPolicy(request.over_length());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("over_length: ", parsed.status().message()));
    }
    over_length = *parsed;
  }
  auto prepared = PrepareTokens(tokens, model.length_policy(over_length));
  if (!prepared.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", Quoted(model.name()), ": ", prepared.status().message()));
  }
  return prepared;
}

// A classified request's answer: the best label, the top_k classes by probability (all of them,
// in class order, when top_k is 0) and how its batch ran.
void FillResponse(const ServedModel& model, const ClassifyWork& work, std::uint32_t top_k,
                  bool truncated, pb::ClassifyResponse* response) {
  const auto& labels = model.metadata().labels;
  std::vector<std::uint32_t> order(work.probabilities.size());
  std::iota(order.begin(), order.end(), 0u);
  const auto best = std::max_element(work.probabilities.begin(), work.probabilities.end()) -
                    work.probabilities.begin();
  response->set_label(labels[best]);
  if (top_k > 0) {
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return work.probabilities[a] > work.probabilities[b];
    });
    order.resize(top_k);
  }
  for (const auto c : order) {
    auto* p = response->add_probabilities();
    p->set_label(labels[c]);
    p->set_index(c);
    p->set_probability(work.probabilities[c]);
  }
  response->set_path(ToProtoPath(work.path));
  std::int64_t longest_window = 0;
  for (const auto& w : work.windows) {
    longest_window = std::max<std::int64_t>(longest_window, w.size());
  }
  response->set_tokens(static_cast<std::uint32_t>(longest_window + 1));
  response->set_truncated(truncated);
  response->set_windows(static_cast<std::uint32_t>(work.windows.size()));
  response->set_model_version(model.version());
  auto* timing = response->mutable_timing();
  timing->set_queue_seconds(work.queue_seconds);
  timing->set_compute_seconds(work.compute_seconds);
  timing->set_batch_size(static_cast<std::uint32_t>(work.batch_size));
  timing->set_batch_tokens(static_cast<std::uint32_t>(work.batch_tokens));
}

}  // namespace

void InferenceCore::Classify(const CallContext& call, const pb::ClassifyRequest& request,
                             ClassifyDone done) {
  const absl::Time received = clock_->Now();
  const std::string& model_name = request.model();
  const std::string label = ModelLabel(model_name);
  // Every exit goes through here: metrics, then the caller's callback.
  // `reason`: the rejected_total reason when not the status code's usual one.
  auto finish = [this, label, protocol = std::string(call.protocol), received, done](
                    const absl::Status& status, pb::ClassifyResponse response,
                    const char* reason = nullptr) {
    if (metrics_ != nullptr) {
      metrics_->RecordRequest(label, protocol, StatusCodeName(status.code()),
                              absl::ToDoubleSeconds(clock_->Now() - received));
      if (!status.ok()) {
        metrics_->RecordRejected(label, reason != nullptr ? reason : RejectReason(status.code()));
      }
    }
    done(status, std::move(response));
  };
  if (auto auth = authorizer_->Check(call.authorization, kClassifyRole); !auth.ok()) {
    return finish(auth, {});
  }
  if (model_name.empty()) {
    return finish(absl::InvalidArgumentError("model: required (see ListModels)"), {});
  }
  if (!job::IsValidName(model_name)) {
    // ".", ".." or a service's name is refused as what it is, not looked up.
    return finish(absl::InvalidArgumentError(absl::StrCat("model: must match ", job::kNameRule,
                                                          ", got ", Quoted(model_name))),
                  {});
  }
  const auto model = registry_->Find(model_name);
  if (model == nullptr) return finish(NotServed(model_name), {});
  auto path = FromProtoPath(request.path());
  if (!path.ok()) return finish(path.status(), {});
  if (*path != AttentionPath::kAuto && !options_.classify_diagnostic_options) {
    // Diagnosis only: an admin's, unless the configuration lets classify tokens choose too.
    if (auto admin = authorizer_->Check(call.authorization, kAdminRole); !admin.ok()) {
      return finish(absl::PermissionDeniedError(absl::StrCat(
                        "path ", std::string(AttentionPathName(*path)),
                        ": choosing the attention path is a diagnosis-only option for admin "
                        "tokens (auth.classify_diagnostic_options: true allows it for classify "
                        "tokens); leave path at auto")),
                    {});
    }
  }
  auto prepared = PrepareInput(request, *model);
  if (!prepared.ok()) return finish(prepared.status(), {});
  const std::uint32_t classes = static_cast<std::uint32_t>(model->metadata().labels.size());
  if (request.top_k() > classes) {
    return finish(absl::InvalidArgumentError(absl::StrCat(
                      "top_k: ", request.top_k(), " exceeds the model's ", classes, " classes")),
                  {});
  }
  if (metrics_ != nullptr) metrics_->RecordSequenceLength(model_name, prepared->input_tokens + 1);

  auto task = std::make_unique<BatchTask<ClassifyWork>>();
  task->payload.windows = std::move(prepared->windows);
  task->payload.requested = *path;
  std::int64_t longest = 0;
  for (const auto& w : task->payload.windows) longest = std::max<std::int64_t>(longest, w.size());
  task->tokens = longest + 1;
  // Every window is a row of the forward pass: each counts against the token budget and the cost.
  task->rows = static_cast<std::int64_t>(task->payload.windows.size());
  // A batch is padded to its longest row, not to its bucket: the longest window is what it costs.
  task->cost = model->EstimateMflop(*path, task->tokens, task->rows);
  for (const auto& [limit, key] :
       {std::pair<double, const char*>{model->max_request_mflop(), "max_request_mflop"},
        {model->max_batch_mflop(), "max_batch_mflop"}}) {
    if (task->cost > limit) {
      return finish(
          absl::ResourceExhaustedError(absl::StrFormat(
              "model %s: the request's estimated cost %.0f MFLOP (%d window%s x %d tokens on "
              "path %s) exceeds %s=%.0f; send fewer windows or shorter documents, or path auto",
              Quoted(model_name), task->cost, task->rows, task->rows == 1 ? "" : "s", task->tokens,
              std::string(AttentionPathName(model->ResolvedPath(*path, task->tokens))), key,
              limit)),
          {}, "over_cost");
    }
  }
  task->path = static_cast<int>(*path);
  task->deadline = call.timeout == absl::InfiniteDuration() ? absl::InfiniteFuture()
                                                            : clock_->Now() + call.timeout;
  if (task->deadline <= clock_->Now()) {
    return finish(absl::DeadlineExceededError("deadline expired before the request was queued"),
                  {});
  }
  task->cancelled = call.cancelled;
  task->done = [metrics = metrics_, model, truncated = prepared->truncated,
                request_id = request.request_id(), top_k = request.top_k(),
                finish](const absl::Status& status, ClassifyWork& work) {
    pb::ClassifyResponse response;
    response.set_request_id(request_id);
    if (!status.ok()) return finish(status, std::move(response));
    if (metrics != nullptr) metrics->RecordQueue(model->name(), work.queue_seconds);
    FillResponse(*model, work, top_k, truncated, &response);
    finish(absl::OkStatus(), std::move(response));
  };
  if (auto scheduled = model->batcher().Schedule(task); !scheduled.ok()) {
    return finish(scheduled, {});
  }
}

void FillModelInfo(const ServedModel& model, pb::ModelInfo* info) {
  info->set_name(model.name());
  info->set_version(model.version());
  info->set_modality(model.metadata().modality);
  for (const auto& label : model.metadata().labels) info->add_labels(label);
  info->set_max_length(static_cast<std::uint32_t>(model.max_length()));
  info->set_embed_dim(static_cast<std::uint32_t>(model.options().embed_dim()));
  info->set_depth(static_cast<std::uint32_t>(model.options().depth()));
  info->set_heads(static_cast<std::uint32_t>(model.options().heads()));
  info->set_head_dim(
      static_cast<std::uint32_t>(model.options().embed_dim() / model.options().heads()));
  info->set_crossover_tokens(static_cast<std::uint32_t>(model.crossover_tokens()));
  info->set_crossover_source(model.crossover_source());
  info->set_over_length_policy(std::string(LengthPolicyName(model.config().over_length)));
  const LengthPolicyOptions policy = model.length_policy();
  info->set_window_stride(static_cast<std::uint32_t>(WindowStride(policy)));
  info->set_max_windows(static_cast<std::uint32_t>(policy.max_windows));
  info->set_device(model.device().str());
  info->set_precision(PrecisionName(model.config().precision));
  for (const auto& [batch, tokens] : model.crossover_table().entries()) {
    auto* crossover = info->add_crossovers();
    crossover->set_batch(static_cast<std::uint32_t>(batch));
    crossover->set_tokens(static_cast<std::uint32_t>(tokens));
  }
}

absl::Status InferenceCore::AdmitTogether(const CallContext& call,
                                          const std::vector<pb::ClassifyRequest>& requests) {
  if (requests.size() < 2) return absl::OkStatus();
  const std::string& name = requests.front().model();
  const auto refuse = [&](const absl::Status& status, const char* reason) {
    if (metrics_ != nullptr) {
      const std::string label = ModelLabel(name);
      for (std::size_t i = 0; i < requests.size(); ++i) {
        metrics_->RecordRequest(label, call.protocol, StatusCodeName(status.code()), 0.0);
        metrics_->RecordRejected(label, reason != nullptr ? reason : RejectReason(status.code()));
      }
    }
    return status;
  };
  if (auto auth = Authorize(call); !auth.ok()) return refuse(auth, nullptr);
  const auto model = registry_->Find(name);
  // Classify answers an unknown or invalid name for each element.
  if (model == nullptr) return absl::OkStatus();
  double cost = 0;
  std::int64_t rows = 0;
  std::int64_t longest = 0;
  AttentionPath path = AttentionPath::kAuto;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto element = [i](const absl::Status& status) {
      return absl::Status(status.code(), absl::StrCat("batch element ", i, ": ", status.message()));
    };
    auto requested = FromProtoPath(requests[i].path());
    if (!requested.ok()) return refuse(element(requested.status()), nullptr);
    path = *requested;
    // A path this caller may not choose: Classify refuses each element for that, first.
    if (path != AttentionPath::kAuto && !options_.classify_diagnostic_options &&
        !authorizer_->Check(call.authorization, kAdminRole).ok()) {
      return absl::OkStatus();
    }
    auto prepared = PrepareInput(requests[i], *model);
    if (!prepared.ok()) return refuse(element(prepared.status()), nullptr);
    std::int64_t tokens = 0;
    for (const auto& w : prepared->windows) tokens = std::max<std::int64_t>(tokens, w.size());
    const auto windows = static_cast<std::int64_t>(prepared->windows.size());
    cost += model->EstimateMflop(path, tokens + 1, windows);
    rows += windows;
    longest = std::max(longest, tokens + 1);
  }
  // The elements may cost together what one request may, or what as many documents of
  // max_length cost on AUTO, whichever is more: a batch of plain documents is never refused
  // (max_infer_batch bounds their count), a batch of windowed or softmax ones is. (The
  // automatic limits are multiples of one window's cost: sums may differ in the last bits.)
  const double allowed =
      std::max(model->max_request_mflop(),
               static_cast<double>(requests.size()) *
                   model->EstimateMflop(AttentionPath::kAuto, model->max_length() + 1, 1));
  if (cost > allowed * (1 + 1e-9)) {
    return refuse(absl::ResourceExhaustedError(absl::StrFormat(
                      "model %s: the request's %d elements together (%d window%s, the longest "
                      "%d tokens) have an estimated cost of %.0f MFLOP, over %.0f MFLOP (the "
                      "larger of max_request_mflop=%.0f and %d documents of max_length on "
                      "path auto); send fewer or shorter elements, or path auto",
                      Quoted(name), requests.size(), rows, rows == 1 ? "" : "s", longest, cost,
                      allowed, model->max_request_mflop(), requests.size())),
                  "over_cost");
  }
  return absl::OkStatus();
}

absl::Status InferenceCore::Authorize(const CallContext& call) const {
  return authorizer_->Check(call.authorization, kClassifyRole);
}

absl::Status InferenceCore::AuthorizeClassify(const CallContext& call,
                                              const std::string& model) const {
  absl::Status allowed = Authorize(call);
  if (!allowed.ok() && metrics_ != nullptr) {
    const std::string label = ModelLabel(model);
    metrics_->RecordRequest(label, call.protocol, StatusCodeName(allowed.code()), 0.0);
    metrics_->RecordRejected(label, RejectReason(allowed.code()));
  }
  return allowed;
}

std::string InferenceCore::ModelLabel(const std::string& model) const {
  // A name that is not served is "(unknown)", so that clients cannot create a series per name
  // they send.
  if (model.empty()) return "-";
  return registry_->Find(model) != nullptr ? model : "(unknown)";
}

absl::StatusOr<std::vector<pb::ModelInfo>> InferenceCore::ListModels(const CallContext& call) {
  TS_RETURN_IF_ERROR(authorizer_->Check(call.authorization, kClassifyRole));
  std::vector<pb::ModelInfo> models;
  for (const auto& model : registry_->List()) FillModelInfo(*model, &models.emplace_back());
  return models;
}

absl::StatusOr<pb::ModelInfo> InferenceCore::GetModel(const CallContext& call,
                                                      const std::string& name) {
  TS_RETURN_IF_ERROR(authorizer_->Check(call.authorization, kClassifyRole));
  const auto model = registry_->Find(name);
  if (model == nullptr) return NotServed(name);
  pb::ModelInfo info;
  FillModelInfo(*model, &info);
  return info;
}

absl::Status InferenceCore::NotServed(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& m : registry_->List()) names.push_back(m->name());
  return absl::NotFoundError(absl::StrCat("model ", Quoted(name), " is not served (",
                                          names.empty() ? "none are" : absl::StrJoin(names, ", "),
                                          ")"));
}

bool InferenceCore::Ready() const { return !draining_ && !registry_->List().empty(); }

}  // namespace ts::server
