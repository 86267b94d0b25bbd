#include "server/classifier_service.h"

#include <algorithm>
#include <deque>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "model/cost_model.h"
#include "model/quoted.h"
#include "server/grpc_status.h"

namespace ts::server {
namespace {

namespace pb = taylorshift::v1;

constexpr char kClassifyRole[] = "classify";

pb::AttentionPath ToProtoPath(AttentionPath path) {
  switch (path) {
    case AttentionPath::kDirect:
      return pb::ATTENTION_PATH_DIRECT;
    case AttentionPath::kEfficient:
      return pb::ATTENTION_PATH_EFFICIENT;
    case AttentionPath::kSoftmax:
      return pb::ATTENTION_PATH_SOFTMAX;
    default:
      return pb::ATTENTION_PATH_AUTO;
  }
}

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

// Converts a gRPC deadline (system clock) into the injected clock's time base.
absl::Time Deadline(const grpc::CallbackServerContext& context, Clock* clock) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  const absl::Duration remaining = absl::FromChrono(deadline - std::chrono::system_clock::now());
  return clock->Now() + remaining;
}

}  // namespace

void ClassifierService::StartClassify(grpc::CallbackServerContext* context,
                                      const pb::ClassifyRequest& request, ClassifyDone done) {
  const absl::Time received = clock_->Now();
  const std::string model_name = request.model();
  // The metrics' model label: a name that is not served is "(unknown)", so that clients cannot
  // create a series per name they send.
  const std::string label = model_name.empty()                       ? "-"
                            : registry_->Find(model_name) != nullptr ? model_name
                                                                     : "(unknown)";
  // Every exit goes through here: metrics, then the caller's callback.
  auto finish = [this, label, received, done](const absl::Status& status,
                                              pb::ClassifyResponse response) {
    if (metrics_ != nullptr) {
      metrics_->RecordRequest(label, StatusCodeName(status.code()),
                              absl::ToDoubleSeconds(clock_->Now() - received));
      if (!status.ok()) metrics_->RecordRejected(label, RejectReason(status.code()));
    }
    done(status, std::move(response));
  };
  if (auto auth = authorizer_->Check(*context, kClassifyRole); !auth.ok()) {
    return finish(auth, {});
  }
  if (model_name.empty()) {
    return finish(absl::InvalidArgumentError("model: required (see ListModels)"), {});
  }
  const auto model = registry_->Find(model_name);
  if (model == nullptr) {
    std::vector<std::string> names;
    for (const auto& m : registry_->List()) names.push_back(m->name());
    return finish(absl::NotFoundError(
                      absl::StrCat("model ", Quoted(model_name), " is not served (",
                                   names.empty() ? "none are" : absl::StrJoin(names, ", "), ")")),
                  {});
  }
  auto path = FromProtoPath(request.path());
  if (!path.ok()) return finish(path.status(), {});
  std::string tokens;
  switch (request.input_case()) {
    case pb::ClassifyRequest::kDocument:
      tokens = request.document();
      break;
    case pb::ClassifyRequest::kImage: {
      if (model->metadata().modality != "pixels") {
        return finish(absl::InvalidArgumentError(absl::StrCat("image: model ", Quoted(model_name),
                                                              " takes documents (modality ",
                                                              model->metadata().modality, ")")),
                      {});
      }
      const auto& image = request.image();
      auto pixels = ImageToTokens(image.width(), image.height(), image.channels(), image.pixels());
      if (!pixels.ok()) {
        return finish(
            absl::InvalidArgumentError(absl::StrCat("image: ", pixels.status().message())), {});
      }
      tokens = std::move(*pixels);
      break;
    }
    default:
      return finish(absl::InvalidArgumentError("input: set either document or image"), {});
  }
  auto prepared = PrepareTokens(tokens, model->length_policy());
  if (!prepared.ok()) {
    return finish(absl::InvalidArgumentError(absl::StrCat("model ", Quoted(model_name), ": ",
                                                          prepared.status().message())),
                  {});
  }
  const std::uint32_t classes = static_cast<std::uint32_t>(model->metadata().labels.size());
  if (request.top_k() > classes) {
    return finish(absl::InvalidArgumentError(absl::StrCat(
                      "top_k: ", request.top_k(), " exceeds the model's ", classes, " classes")),
                  {});
  }
  if (metrics_ != nullptr) metrics_->RecordSequenceLength(model_name, prepared->input_tokens + 1);

  auto work = std::make_shared<ClassifyWork>();
  work->windows = std::move(prepared->windows);
  work->requested = *path;
  auto task = std::make_unique<BatchTask>();
  std::int64_t longest = 0;
  for (const auto& w : work->windows) longest = std::max<std::int64_t>(longest, w.size());
  task->tokens = longest + 1;
  task->path = static_cast<int>(*path);
  task->deadline = Deadline(*context, clock_);
  if (task->deadline <= clock_->Now()) {
    return finish(absl::DeadlineExceededError("deadline expired before the request was queued"),
                  {});
  }
  task->cancelled = [context] { return context->IsCancelled(); };
  task->payload = work;
  const bool truncated = prepared->truncated;
  const std::string request_id = request.request_id();
  const std::uint32_t top_k = request.top_k();
  task->done = [metrics = metrics_, model, work, truncated, request_id, top_k,
                finish](absl::Status status) {
    pb::ClassifyResponse response;
    response.set_request_id(request_id);
    if (!status.ok()) return finish(status, std::move(response));
    if (metrics != nullptr) metrics->RecordQueue(model->name(), work->queue_seconds);
    const auto& labels = model->metadata().labels;
    std::vector<std::uint32_t> order(work->probabilities.size());
    std::iota(order.begin(), order.end(), 0u);
    const auto best = std::max_element(work->probabilities.begin(), work->probabilities.end()) -
                      work->probabilities.begin();
    response.set_label(labels[best]);
    if (top_k > 0) {
      std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
        return work->probabilities[a] > work->probabilities[b];
      });
      order.resize(top_k);
    }
    for (const auto c : order) {
      auto* p = response.add_probabilities();
      p->set_label(labels[c]);
      p->set_index(c);
      p->set_probability(work->probabilities[c]);
    }
    response.set_path(ToProtoPath(work->path));
    std::int64_t longest_window = 0;
    for (const auto& w : work->windows) {
      longest_window = std::max<std::int64_t>(longest_window, w.size());
    }
    response.set_tokens(static_cast<std::uint32_t>(longest_window + 1));
    response.set_truncated(truncated);
    response.set_windows(static_cast<std::uint32_t>(work->windows.size()));
    response.set_model_version(model->version());
    auto* timing = response.mutable_timing();
    timing->set_queue_seconds(work->queue_seconds);
    timing->set_compute_seconds(work->compute_seconds);
    timing->set_batch_size(static_cast<std::uint32_t>(work->batch_size));
    timing->set_batch_tokens(static_cast<std::uint32_t>(work->batch_tokens));
    finish(absl::OkStatus(), std::move(response));
  };
  if (auto scheduled = model->batcher().Schedule(task); !scheduled.ok()) {
    return finish(scheduled, {});
  }
}

grpc::ServerUnaryReactor* ClassifierService::Classify(grpc::CallbackServerContext* context,
                                                      const pb::ClassifyRequest* request,
                                                      pb::ClassifyResponse* response) {
  auto* reactor = context->DefaultReactor();
  StartClassify(context, *request,
                [reactor, response](const absl::Status& status, pb::ClassifyResponse result) {
                  if (status.ok()) *response = std::move(result);
                  reactor->Finish(ToGrpcStatus(status));
                });
  return reactor;
}

namespace {

// ClassifyStream: reads requests as they come, classifies each through the batcher, writes
// each response when it is ready (one write in flight at a time), and finishes once the client
// has half-closed and every request has been answered. It never finishes while a request is
// still in the batcher, so no callback can outlive the reactor.
class ClassifyStreamReactor final
    : public grpc::ServerBidiReactor<pb::ClassifyRequest, pb::ClassifyResponse> {
 public:
  ClassifyStreamReactor(ClassifierService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        finish = ShouldFinishLocked();
      }
      if (finish) FinishStream();
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    const pb::ClassifyRequest request = request_;
    StartRead(&request_);
    service_->StartClassify(context_, request,
                            [this, id = request.request_id()](const absl::Status& status,
                                                              pb::ClassifyResponse response) {
                              if (!status.ok()) {
                                response.set_request_id(id);
                                response.set_error_code(static_cast<int>(status.code()));
                                response.set_error_message(std::string(status.message()));
                              }
                              bool finish = false;
                              {
                                absl::MutexLock lock(&mu_);
                                --pending_;
                                outbox_.push_back(std::move(response));
                                MaybeWriteLocked();
                                finish = ShouldFinishLocked();
                              }
                              if (finish) FinishStream();
                            });
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) write_failed_ = true;
      outbox_.pop_front();
      MaybeWriteLocked();
      finish = ShouldFinishLocked();
    }
    if (finish) FinishStream();
  }

  void OnDone() override { delete this; }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || outbox_.empty() || write_failed_) return;
    writing_ = true;
    StartWrite(&outbox_.front());
  }
  // True exactly once: when the client has half-closed, nothing is pending and everything is
  // written. The caller then calls FinishStream() after releasing mu_ (OnDone may delete this
  // as soon as Finish is called, so it must be the caller's last action).
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || pending_ > 0 || writing_) return false;
    if (!outbox_.empty() && !write_failed_) return false;
    finished_ = true;
    return true;
  }
  void FinishStream() {
    Finish(context_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
  }

  ClassifierService* service_;
  grpc::CallbackServerContext* context_;
  pb::ClassifyRequest request_;
  absl::Mutex mu_;
  std::deque<pb::ClassifyResponse> outbox_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

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
  info->set_over_length_policy(OverLengthPolicyName(model.config().over_length));
  info->set_device(model.device().str());
  info->set_precision(PrecisionName(model.config().precision));
}

grpc::ServerBidiReactor<pb::ClassifyRequest, pb::ClassifyResponse>*
ClassifierService::ClassifyStream(grpc::CallbackServerContext* context) {
  return new ClassifyStreamReactor(this, context);
}

grpc::ServerUnaryReactor* ClassifierService::ListModels(grpc::CallbackServerContext* context,
                                                        const pb::ListModelsRequest* /*request*/,
                                                        pb::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (auto auth = authorizer_->Check(*context, kClassifyRole); !auth.ok()) {
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  for (const auto& model : registry_->List()) FillModelInfo(*model, response->add_models());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* ClassifierService::GetModel(grpc::CallbackServerContext* context,
                                                      const pb::GetModelRequest* request,
                                                      pb::ModelInfo* response) {
  auto* reactor = context->DefaultReactor();
  if (auto auth = authorizer_->Check(*context, kClassifyRole); !auth.ok()) {
    reactor->Finish(ToGrpcStatus(auth));
    return reactor;
  }
  const auto model = registry_->Find(request->name());
  if (model == nullptr) {
    reactor->Finish(ToGrpcStatus(
        absl::NotFoundError(absl::StrCat("model ", Quoted(request->name()), " is not served"))));
    return reactor;
  }
  FillModelInfo(*model, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace ts::server
