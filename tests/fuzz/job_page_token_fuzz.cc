// The Jobs API's paged reads as a client sends them (serialized ListJobsRequest or
// GetJobHistoryRequest, selector bit 0; with bit 7 their text form, proto_input.h), against the job
// stores (tests/testing/job_stores.h) holding three jobs with loss curves and validation runs: the
// page tokens (web-safe base64 of positions a client can forge), page sizes and filters. An
// answer's next_page_token, followed, must reach the last page, without returning more entries than
// the store holds.
#include <cstdint>
#include <memory>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/proto_input.h"
#include "tests/testing/job_stores.h"

namespace {

namespace pb = taylorshift::v1;

constexpr int kStoredJobs = 3;
constexpr int kStoredEntries = 2 * (6 + 2);  // loss points and validation runs of jobs 1 and 2

ts::testing::JobStores& Store() {
  static const std::unique_ptr<ts::testing::JobStores> store = [] {
    const std::string path = (ts::fuzz::ScratchFolder::Get().path() / "jobs.db").string();
    auto opened = ts::testing::JobStores::Open(path);
    if (!opened.ok()) ts::fuzz::Broken(std::string(opened.status().message()));
    for (int i = 0; i < kStoredJobs; ++i) {
      pb::Job job;
      job.set_kind(i < 2 ? pb::JOB_KIND_TRAINING : pb::JOB_KIND_EVALUATION);
      job.set_state(i == 0 ? pb::JOB_STATE_RUNNING : pb::JOB_STATE_SUCCEEDED);
      job.set_name("job" + std::to_string(i));
      auto created = (*opened)->jobs.CreateJob(job);
      if (!created.ok() || i == 2) continue;
      for (std::int64_t step = 1; step <= 6; ++step) {
        (void)(*opened)->history.AppendMetric(created->id(), {step, 1.0, 1e-3, 10, step});
        if (step % 3 == 0) {
          pb::EvaluationReport report;
          report.set_step(static_cast<std::uint64_t>(step));
          (void)(*opened)->history.AppendEvaluation(created->id(), report);
        }
      }
    }
    return *std::move(opened);
  }();
  return *store;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ts::fuzz::Input input = ts::fuzz::SplitInput(data, size);
  ts::testing::JobStores& store = Store();
  if (input.selector & 1) {
    pb::GetJobHistoryRequest request;
    if (!ts::fuzz::ParseMessage(input, &request)) return 0;
    int entries = 0;
    for (int page = 0; page <= kStoredEntries + 1; ++page) {
      auto response = store.history.History(request);
      if (!response.ok()) return 0;
      entries += response->loss_curve_size() + response->validations_size();
      if (entries > kStoredEntries) ts::fuzz::Broken("history pages repeat entries");
      if (response->next_page_token().empty()) return 0;
      request.set_page_token(response->next_page_token());
    }
    ts::fuzz::Broken("history pages never end");
  } else {
    pb::ListJobsRequest request;
    if (!ts::fuzz::ParseMessage(input, &request)) return 0;
    int jobs = 0;
    for (int page = 0; page <= kStoredJobs + 1; ++page) {
      auto response = store.jobs.ListJobs(request);
      if (!response.ok()) return 0;
      jobs += response->jobs_size();
      if (jobs > kStoredJobs) ts::fuzz::Broken("job pages repeat jobs");
      if (response->next_page_token().empty()) return 0;
      request.set_page_token(response->next_page_token());
    }
    ts::fuzz::Broken("job pages never end");
  }
  return 0;
}
