// tsctl's job commands: flag parsing into requests, the refusals that happen before any
// connection (exit status 2 for usage, 1 for a bad spec file), and the commands against a
// scripted Jobs service (what they send, what they print, how they exit). The commands against
// a real server are covered by the integration tests.
#include "client/jobs_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/command_line.h"
#include "client/job_format.h"
#include "common/command_line.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "job_contract/job_spec_yaml.h"
#include "tests/testing/fake_jobs_service.h"

namespace ts::client {
namespace {

using ts::testing::FakeJobsService;

using taylorshift::v1::Job;
using taylorshift::v1::JobEvent;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs tsctl's job command `command` with `args` (the words after it).
int RunCommand(const std::string& command, std::vector<std::string> args) {
  Commands commands;
  AddJobCommands(commands);
  args.insert(args.begin(), command);
  return commands.Run(std::move(args));
}

// Parses `args` with the flags `add` binds to *flags: CLI11's usage error, or "" when they parse.
template <typename Flags>
std::string ParseError(void (*add)(CLI::App&, Flags*), Flags* flags,
                       std::vector<std::string> args) {
  CLI::App app;
  UseFlagConventions(app);
  add(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 takes the words last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(CommandLineTest, ValueBoolAndInlineFlags) {
  std::string server;
  bool wait = false;
  std::int64_t limit = 0;
  std::vector<std::string> rest;
  CLI::App app;
  UseFlagConventions(app);
  app.add_option("--server", server);
  app.add_flag("--wait", wait);
  app.add_option("--limit", limit)->check(IntegerIn(0, 10));
  app.add_option("rest", rest);
  std::vector<std::string> args = {"--server", "a:1", "--server=h:1", "--wait",
                                   "-",        "--",  "--json"};
  std::reverse(args.begin(), args.end());
  app.parse(args);
  EXPECT_EQ(server, "h:1");  // the last one given
  EXPECT_TRUE(wait);
  EXPECT_EQ(rest, (std::vector<std::string>{"-", "--json"}));  // "-" and after "--": positional

  const auto error_of = [&](std::vector<std::string> words) -> std::string {
    app.clear();
    std::reverse(words.begin(), words.end());
    try {
      app.parse(words);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error_of({"--server", "a", "--follow"}), HasSubstr("--follow"));
  EXPECT_THAT(error_of({"--server"}), HasSubstr("--server"));
  EXPECT_THAT(error_of({"--wait=yes"}), HasSubstr("wait"));
  EXPECT_EQ(error_of({"--limit", "abc"}), "--limit: must be an integer in 0..10, got 'abc'");
  EXPECT_EQ(error_of({"--limit=11"}), "--limit: must be an integer in 0..10, got '11'");
  EXPECT_EQ(error_of({"--limit=10"}), "");
}

TEST(CommandLineTest, ConnectionFlagsApplyToJobCommands) {
  ConnectionFlags flags;
  EXPECT_EQ(ParseError(AddConnectionFlags, &flags,
                       {"--server", "10.0.0.1:7000", "--ca-file", "ca.pem", "--cert-file", "c.pem",
                        "--key-file", "k.pem", "--tls-server-name", "ts.local", "--token", "t0k",
                        "--max-message-bytes", "1024", "--tls", "--timeout-ms=5"}),
            "");
  const ConnectionOptions& options = flags.connection;
  EXPECT_EQ(options.server, "10.0.0.1:7000");
  EXPECT_TRUE(options.tls);
  EXPECT_EQ(options.ca_file, "ca.pem");
  EXPECT_EQ(options.cert_file, "c.pem");
  EXPECT_EQ(options.key_file, "k.pem");
  EXPECT_EQ(options.tls_server_name, "ts.local");
  EXPECT_EQ(options.token, "t0k");
  EXPECT_EQ(options.max_message_bytes, 1024);
  EXPECT_EQ(flags.TimeoutMs(30000), 5);

  ConnectionFlags defaults;
  EXPECT_EQ(ParseError(AddConnectionFlags, &defaults, {}), "");
  EXPECT_EQ(defaults.connection.server, "127.0.0.1:50051");
  EXPECT_EQ(defaults.TimeoutMs(30000), 30000);

  ConnectionFlags half;
  EXPECT_THAT(ParseError(AddConnectionFlags, &half, {"--cert-file", "c.pem"}),
              HasSubstr("--cert-file requires --key-file"));
  ConnectionFlags empty;
  EXPECT_THAT(ParseError(AddConnectionFlags, &empty, {"--server", ""}),
              HasSubstr("--server: must not be empty"));
}

TEST(JobsCommandsTest, ListOptions) {
  ListFlags flags;
  EXPECT_EQ(
      ParseError(AddListFlags, &flags, {"--state", "Running", "--kind=training", "--limit", "25"}),
      "");
  EXPECT_EQ(flags.state, taylorshift::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(flags.kind, taylorshift::v1::JOB_KIND_TRAINING);
  EXPECT_EQ(flags.limit, 25);

  ListFlags none;
  EXPECT_EQ(ParseError(AddListFlags, &none, {}), "");
  EXPECT_EQ(none.state, taylorshift::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(none.kind, taylorshift::v1::JOB_KIND_UNSPECIFIED);
  EXPECT_EQ(none.limit, 0);

  ListFlags bad;
  EXPECT_THAT(ParseError(AddListFlags, &bad, {"--state", "done"}),
              HasSubstr("--state: unknown state 'done'"));
  EXPECT_THAT(ParseError(AddListFlags, &bad, {"--kind", "serving"}),
              HasSubstr("--kind: unknown kind 'serving'"));
  EXPECT_THAT(ParseError(AddListFlags, &bad, {"--limit", "-1"}),
              HasSubstr("--limit: must be an integer in 0.."));
}

TEST(JobsCommandsTest, PromoteFromAJob) {
  PromoteFlags flags;
  EXPECT_EQ(
      ParseError(AddPromoteFlags, &flags, {"--job", "j-7", "--model", "imdb", "--require-better"}),
      "");
  const auto& request = flags.request;
  EXPECT_EQ(request.model(), "imdb");
  EXPECT_EQ(request.job_id(), "j-7");
  EXPECT_EQ(request.which(), taylorshift::v1::CHECKPOINT_CHOICE_BEST);
  EXPECT_TRUE(request.require_at_least_current_accuracy());

  PromoteFlags last;
  EXPECT_EQ(ParseError(AddPromoteFlags, &last, {"--job", "j-7", "--last", "--model", "imdb"}), "");
  EXPECT_EQ(last.request.which(), taylorshift::v1::CHECKPOINT_CHOICE_LAST);
}

TEST(JobsCommandsTest, PromoteFromACheckpoint) {
  PromoteFlags flags;
  EXPECT_EQ(
      ParseError(AddPromoteFlags, &flags, {"--checkpoint", "runs/a.tsckpt", "--model", "imdb"}),
      "");
  EXPECT_EQ(flags.request.checkpoint(), "runs/a.tsckpt");
  EXPECT_FALSE(flags.request.require_at_least_current_accuracy());
}

TEST(JobsCommandsTest, PromoteRefusesIncompleteOrConflictingSources) {
  const auto error_of = [](const std::vector<std::string>& args) {
    PromoteFlags flags;
    return ParseError(AddPromoteFlags, &flags, args);
  };
  EXPECT_THAT(error_of({"--job", "j-1"}), HasSubstr("--model is required"));
  EXPECT_THAT(error_of({"--model", "m"}), HasSubstr("Exactly 1 option from [--job,--checkpoint]"));
  EXPECT_THAT(error_of({"--model", "m", "--job", "j", "--checkpoint", "c.tsckpt"}),
              HasSubstr("Exactly 1 option from [--job,--checkpoint] is required and 2 were given"));
  EXPECT_THAT(error_of({"--model", "m", "--checkpoint", "c.tsckpt", "--last"}),
              HasSubstr("--last requires --job"));
  EXPECT_THAT(error_of({"--model", "m", "--job", ""}), HasSubstr("--job: must not be empty"));
}

// Issue 45: --force overrides the task guard; --rollback names only the model.
TEST(JobsCommandsTest, PromoteForceAndRollback) {
  PromoteFlags forced;
  EXPECT_EQ(ParseError(AddPromoteFlags, &forced, {"--job", "j-7", "--model", "imdb", "--force"}),
            "");
  EXPECT_TRUE(forced.request.force());
  EXPECT_FALSE(forced.rollback);

  PromoteFlags rollback;
  EXPECT_EQ(ParseError(AddPromoteFlags, &rollback, {"--rollback", "--model", "imdb"}), "");
  EXPECT_TRUE(rollback.rollback);
  EXPECT_EQ(rollback.request.model(), "imdb");
  EXPECT_FALSE(rollback.request.force());

  const auto error_of = [](const std::vector<std::string>& args) {
    PromoteFlags flags;
    return ParseError(AddPromoteFlags, &flags, args);
  };
  EXPECT_THAT(error_of({"--rollback"}), HasSubstr("--model is required"));
  EXPECT_THAT(error_of({"--rollback", "--model", "m", "--job", "j"}), HasSubstr("excludes"));
  EXPECT_THAT(error_of({"--rollback", "--model", "m", "--checkpoint", "c.tsckpt"}),
              HasSubstr("excludes"));
  EXPECT_THAT(error_of({"--rollback", "--model", "m", "--force"}), HasSubstr("excludes"));
  // Without --rollback a source is still required.
  EXPECT_THAT(error_of({"--model", "m", "--force"}),
              HasSubstr("Exactly 1 option from [--job,--checkpoint]"));
}

TEST(JobsCommandsTest, DownloadFlags) {
  DownloadFlags job;
  EXPECT_EQ(ParseError(AddDownloadFlags, &job, {"--job", "j-7", "--last", "--out", "a.tsckpt"}),
            "");
  EXPECT_EQ(job.request.job_id(), "j-7");
  EXPECT_EQ(job.request.which(), taylorshift::v1::CHECKPOINT_CHOICE_LAST);
  EXPECT_EQ(job.out, "a.tsckpt");
  DownloadFlags model;
  EXPECT_EQ(ParseError(AddDownloadFlags, &model, {"--model", "imdb", "--out", "b.tsckpt"}), "");
  EXPECT_EQ(model.request.model(), "imdb");
  EXPECT_EQ(model.max_bytes, std::int64_t{16} << 30);

  const auto error_of = [](const std::vector<std::string>& args) {
    DownloadFlags flags;
    return ParseError(AddDownloadFlags, &flags, args);
  };
  EXPECT_THAT(error_of({"--model", "m"}), HasSubstr("--out is required"));
  EXPECT_THAT(error_of({"--out", "f"}), HasSubstr("Exactly 1 option from [--job,--model]"));
  EXPECT_THAT(error_of({"--job", "j", "--model", "m", "--out", "f"}),
              HasSubstr("Exactly 1 option from [--job,--model] is required and 2 were given"));
  EXPECT_THAT(error_of({"--model", "m", "--last", "--out", "f"}),
              HasSubstr("--last requires --job"));
  EXPECT_THAT(error_of({"--model", "m", "--out", "f", "--max-bytes", "0"}),
              HasSubstr("--max-bytes"));
}

class TempSpec {
 public:
  explicit TempSpec(const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() /
             ("jobs_commands_test_" + std::to_string(::getpid()) + ".yaml"))
                .string();
    std::ofstream(path_) << text;
  }
  ~TempSpec() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(JobsCommandsTest, RefusalsBeforeConnecting) {
  // Nothing listens on port 1: a command that got as far as an RPC would fail with UNAVAILABLE
  // and exit 1, so the usage errors (2) show that these stop first.
  const std::vector<std::string> server = {"--server", "127.0.0.1:1", "--timeout-ms", "2000"};
  const auto with_server = [&](std::vector<std::string> args) {
    args.insert(args.end(), server.begin(), server.end());
    return args;
  };
  EXPECT_EQ(RunCommand("train", with_server({})), kExitUsage);  // no --spec
  EXPECT_EQ(RunCommand("train", with_server({"--spec", "a.yaml", "extra"})), kExitUsage);
  EXPECT_EQ(RunCommand("eval", {"--spec"}), kExitUsage);  // --spec without its value
  EXPECT_EQ(RunCommand("jobs", {}), kExitUsage);
  EXPECT_EQ(RunCommand("jobs", with_server({"show", "j-1"})), kExitUsage);
  EXPECT_EQ(RunCommand("jobs", with_server({"get"})), kExitUsage);
  EXPECT_EQ(RunCommand("jobs", with_server({"cancel", "a", "b"})), kExitUsage);
  EXPECT_EQ(RunCommand("jobs", with_server({"list", "--state", "done"})), kExitUsage);
  EXPECT_EQ(RunCommand("promote", with_server({"--model", "m"})), kExitUsage);
  EXPECT_EQ(RunCommand("jobs", with_server({"cancel", "j-1", "--curve"})), kExitUsage);
  EXPECT_EQ(RunCommand("jobs", with_server({"plot", "j-1"})), kExitUsage);  // no --out

  // jobs plot writes CSV or SVG only, and says so before connecting.
  for (const char* out : {"curve.png", "curve", "dir.svg/curve", "curve.svg.pdf", "curve.json"}) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(RunCommand("jobs", with_server({"plot", "j-1", "--out", out})), kExitUsage) << out;
    EXPECT_THAT(::testing::internal::GetCapturedStderr(),
                HasSubstr("jobs plot writes CSV or SVG (a file name ending in .csv or .svg)"));
  }

  // A spec that does not parse is an error (1) named with the file and the key, sent nowhere.
  TempSpec spec("name: x\nmodel: {heads: many}\n");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunCommand("train", with_server({"--spec", spec.path()})), kExitError);
  const std::string stderr_text = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(stderr_text, HasSubstr("INVALID_ARGUMENT: " + spec.path() +
                                     ": model.heads: "
                                     "expected a non-negative integer, got \"many\""));
  EXPECT_THAT(stderr_text, ::testing::Not(HasSubstr("SubmitTraining")));

  // A spec file over 1 MiB (here a comment of 2 MB) is refused before it is read or parsed.
  const std::string comment = "name: x\n# " + std::string(2000000, 'c') + "\n";
  TempSpec huge(comment);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunCommand("train", with_server({"--spec", huge.path()})), kExitError);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("INVALID_ARGUMENT: " + huge.path() + ": " + std::to_string(comment.size()) +
                        " bytes; a spec file is at most 1048576 bytes"));
}

// ---------------------------------------------------------------------------------------------
// Against a scripted service

template <typename Message>
Message FromText(const std::string& text) {
  Message message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

struct Output {
  int status = -1;
  std::vector<std::string> lines;  // stdout
  std::string err;
};

// Runs `command` with stdout and stderr captured; stdout split into lines.
template <typename Command>
Output Capture(Command command) {
  Output out;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  out.status = command();
  const std::string text = ::testing::internal::GetCapturedStdout();
  out.err = ::testing::internal::GetCapturedStderr();
  out.lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  return out;
}

JobEvent Event(JobEvent::Type type, const std::string& job_text) {
  JobEvent event;
  event.set_type(type);
  *event.mutable_job() = FromText<Job>(job_text);
  return event;
}

constexpr char kSpec[] = R"yaml(
name: filetype
model: {embed_dim: 64, depth: 2, heads: 8, mlp_ratio: 2, max_length: 2048}
data:
  train: {format: jsonl, path: train.jsonl}
  validation: {format: jsonl, path: val.jsonl}
optimizer: {name: adamw, lr: 0.001, weight_decay: 0.001, warmup_steps: 20}
batch_size: 16
steps: 300
seed: 1
)yaml";

class JobsCommandsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { service_.Start(); }

  // `args` plus the fake's address and a token.
  std::vector<std::string> Args(std::vector<std::string> args) const {
    args.insert(args.end(), {"--server", service_.address(), "--token", "s3cret"});
    return args;
  }

  // A training run from QUEUED to `final_state`.
  static FakeJobsService::Script TrainingRun(const std::string& final_state,
                                             const std::string& reason) {
    FakeJobsService::Script script;
    script.job = FromText<Job>(
        R"pb(id: "j-1" kind: JOB_KIND_TRAINING name: "filetype" state: JOB_STATE_QUEUED)pb");
    const std::string base = R"pb(id: "j-1" kind: JOB_KIND_TRAINING name: "filetype")pb";
    script.events = {
        Event(JobEvent::SNAPSHOT, base + "state: JOB_STATE_QUEUED"),
        Event(JobEvent::STATE, base + "state: JOB_STATE_RUNNING progress { total_steps: 300 }"),
        Event(JobEvent::PROGRESS, base + R"pb(state: JOB_STATE_RUNNING
                                              progress {
                                                step: 40
                                                total_steps: 300
                                                loss: 1.234
                                                learning_rate: 0.00099
                                                examples_per_second: 12.3
                                              })pb"),
        Event(JobEvent::VALIDATION, base + R"pb(state: JOB_STATE_RUNNING
                                                validation {
                                                  step: 40
                                                  examples: 512
                                                  loss: 0.9
                                                  accuracy: 0.62
                                                  macro_f1: 0.58
                                                })pb"),
        Event(JobEvent::CHECKPOINT, base + "state: JOB_STATE_RUNNING"),
        Event(JobEvent::STATE,
              base + absl::StrCat("state: ", final_state, " reason: \"", reason, "\"",
                                  R"pb(progress { step: 300 total_steps: 300 }
                                       best_validation {
                                         step: 40
                                         examples: 512
                                         loss: 0.9
                                         accuracy: 0.62
                                         macro_f1: 0.58
                                       })pb")),
    };
    *script.events[4].mutable_checkpoint() = FromText<taylorshift::v1::CheckpointInfo>(
        R"pb(kind: "best"
             step: 40
             path: "ckpt/40.tsckpt"
             validation_accuracy: 0.62
             has_validation_accuracy: true)pb");
    return script;
  }

  FakeJobsService service_;
};

TEST_F(JobsCommandsServiceTest, TrainSubmitsTheParsedSpecAndPrintsTheId) {
  TempSpec spec(kSpec);
  service_.set_script(TrainingRun("JOB_STATE_SUCCEEDED", ""));
  const Output out = Capture([&] { return RunCommand("train", Args({"--spec", spec.path()})); });
  EXPECT_EQ(out.status, kExitOk) << out.err;
  EXPECT_THAT(out.lines, ElementsAre("j-1"));
  const FakeJobsService::Record record = service_.record();
  EXPECT_THAT(record.rpcs, ElementsAre("SubmitTraining"));
  EXPECT_EQ(record.authorization, "Bearer s3cret");
  absl::StatusOr<taylorshift::v1::TrainingSpec> expected = ParseTrainingSpecYaml(kSpec);
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(record.training.spec(), *expected))
      << record.training.spec().DebugString();
}

TEST_F(JobsCommandsServiceTest, TrainWaitPrintsOneLinePerEvent) {
  TempSpec spec(kSpec);
  service_.set_script(TrainingRun("JOB_STATE_SUCCEEDED", ""));
  const Output out = Capture([&] {
    return RunCommand("train", Args({"--spec", spec.path(), "--wait"}));
  });
  EXPECT_EQ(out.status, kExitOk) << out.err;
  EXPECT_THAT(out.lines,
              ElementsAre("job j-1 filetype (training): QUEUED", "state RUNNING",
                          "step 40/300 loss 1.234 lr 0.00099 12.3 ex/s",
                          "val acc 0.62 f1 0.58 loss 0.9 (step 40, 512 examples)",
                          "checkpoint best step 40 val acc 0.62: ckpt/40.tsckpt",
                          "state SUCCEEDED: best val acc 0.62 f1 0.58 loss 0.9 (step 40, 512 "
                          "examples)"));
  EXPECT_THAT(service_.record().rpcs, ElementsAre("SubmitTraining", "WatchJob"));
  EXPECT_EQ(service_.record().id, "j-1");
}

TEST_F(JobsCommandsServiceTest, TrainWaitJsonEndsWithTheJob) {
  TempSpec spec(kSpec);
  FakeJobsService::Script script = TrainingRun("JOB_STATE_SUCCEEDED", "");
  const Job final_job = script.events.back().job();
  service_.set_script(script);
  const Output out = Capture([&] {
    return RunCommand("train", Args({"--spec", spec.path(), "--wait", "--json"}));
  });
  EXPECT_EQ(out.status, kExitOk) << out.err;
  ASSERT_EQ(out.lines.size(), 7u);
  for (std::size_t i = 0; i + 1 < out.lines.size(); ++i) {
    EXPECT_THAT(out.lines[i], StartsWith("{\"event\":")) << out.lines[i];
  }
  EXPECT_EQ(out.lines.back(), JobJson(final_job));
  EXPECT_THAT(
      out.lines.back(),
      StartsWith(R"({"id":"j-1","kind":"TRAINING","name":"filetype","state":"SUCCEEDED",)"));
  EXPECT_THAT(out.lines.back(), HasSubstr(R"("metrics":{"step":40,"examples":512,"loss":0.9,)"
                                          R"("accuracy":0.62,"macro_f1":0.58,)"));
}

TEST_F(JobsCommandsServiceTest, AFailedOrCancelledJobExitsOneWithTheReason) {
  TempSpec spec(kSpec);
  service_.set_script(TrainingRun("JOB_STATE_FAILED", "data.train.path: not found"));
  const Output failed = Capture([&] {
    return RunCommand("train", Args({"--spec", spec.path(), "--wait"}));
  });
  EXPECT_EQ(failed.status, kExitError);
  EXPECT_EQ(failed.lines.back(), "state FAILED: data.train.path: not found");
  EXPECT_THAT(failed.err, HasSubstr("tsctl: job j-1 FAILED: data.train.path: not found"));

  service_.set_script(TrainingRun("JOB_STATE_CANCELLED", "cancelled by CancelJob"));
  const Output cancelled = Capture([&] {
    return RunCommand("jobs", Args({"watch", "j-1", "--json"}));
  });
  EXPECT_EQ(cancelled.status, kExitError);
  EXPECT_THAT(cancelled.lines.back(), HasSubstr(R"("state":"CANCELLED")"));
  EXPECT_THAT(cancelled.err, HasSubstr("tsctl: job j-1 CANCELLED: cancelled by CancelJob"));
}

TEST_F(JobsCommandsServiceTest, AWatchThatEndsEarlyIsAnError) {
  FakeJobsService::Script script = TrainingRun("JOB_STATE_SUCCEEDED", "");
  script.events.resize(3);  // still RUNNING
  service_.set_script(script);
  const Output ended = Capture([&] { return RunCommand("jobs", Args({"watch", "j-1"})); });
  EXPECT_EQ(ended.status, kExitError);
  EXPECT_THAT(ended.err, HasSubstr("ended before job j-1 finished (last state RUNNING)"));

  script.watch_end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
  service_.set_script(script);
  const Output broken = Capture([&] { return RunCommand("jobs", Args({"watch", "j-1"})); });
  EXPECT_EQ(broken.status, kExitError);
  EXPECT_THAT(broken.err, HasSubstr("WatchJob on " + service_.address() +
                                    " failed: UNAVAILABLE: server shutting down"));
}

TEST_F(JobsCommandsServiceTest, EvalSubmitsTheEvaluationSpec) {
  TempSpec spec("name: e\nmodel: imdb\ndata: {format: jsonl, path: test.jsonl}\n");
  FakeJobsService::Script script;
  script.job =
      FromText<Job>(R"pb(id: "j-2" kind: JOB_KIND_EVALUATION name: "e" state: JOB_STATE_QUEUED)pb");
  service_.set_script(script);
  const Output out = Capture([&] {
    return RunCommand("eval", Args({"--spec", spec.path(), "--json"}));
  });
  EXPECT_EQ(out.status, kExitOk) << out.err;
  ASSERT_EQ(out.lines.size(), 1u);
  EXPECT_THAT(out.lines[0], StartsWith(R"({"id":"j-2","kind":"EVALUATION","name":"e",)"
                                       R"("state":"QUEUED",)"));
  const FakeJobsService::Record record = service_.record();
  EXPECT_EQ(record.evaluation.spec().model(), "imdb");
  EXPECT_EQ(record.evaluation.spec().data().path(), "test.jsonl");
}

TEST_F(JobsCommandsServiceTest, ListFollowsPagesUntilDoneOrTheLimit) {
  FakeJobsService::Script script;
  for (int i = 5; i >= 1; --i) {
    Job job;
    job.set_id(absl::StrCat("j-", i));
    job.set_kind(taylorshift::v1::JOB_KIND_TRAINING);
    job.set_state(taylorshift::v1::JOB_STATE_SUCCEEDED);
    script.jobs.push_back(job);
  }
  service_.set_script(script);
  const Output all = Capture([&] { return RunCommand("jobs", Args({"list", "--json"})); });
  EXPECT_EQ(all.status, kExitOk) << all.err;
  ASSERT_EQ(all.lines.size(), 5u);
  EXPECT_THAT(all.lines[0], StartsWith(R"({"id":"j-5",)"));
  EXPECT_THAT(all.lines[4], StartsWith(R"({"id":"j-1",)"));
  const auto lists = service_.record().lists;
  ASSERT_EQ(lists.size(), 3u);  // pages of the server's default size 2
  EXPECT_EQ(lists[0].page_token(), "");
  EXPECT_EQ(lists[1].page_token(), "2");
  EXPECT_EQ(lists[2].page_token(), "4");

  FakeJobsService limited;
  limited.Start();
  limited.set_script(script);
  const Output three = Capture([&] {
    return RunCommand("jobs", {"list", "--limit", "3", "--state", "succeeded", "--kind", "training",
                               "--server", limited.address()});
  });
  EXPECT_EQ(three.status, kExitOk) << three.err;
  ASSERT_EQ(three.lines.size(), 4u);  // header and 3 rows
  EXPECT_THAT(three.lines[0], StartsWith("ID "));
  EXPECT_THAT(three.lines[3], StartsWith("j-3 "));
  const auto requests = limited.record().lists;
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].page_size(), 3u);
  EXPECT_EQ(requests[0].state(), taylorshift::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(requests[0].kind(), taylorshift::v1::JOB_KIND_TRAINING);
}

TEST_F(JobsCommandsServiceTest, GetCancelAndPromote) {
  FakeJobsService::Script script;
  script.job = FromText<Job>(R"pb(id: "j-3"
                                  kind: JOB_KIND_TRAINING
                                  name: "t"
                                  state: JOB_STATE_CANCELLED
                                  reason: "cancelled")pb");
  script.promoted = FromText<taylorshift::v1::PromoteCheckpointResponse>(
      R"pb(model { name: "imdb" version: "v2" }
           previous_version: "v1"
           validation_accuracy: 0.9
           previous_validation_accuracy: 0.8)pb");
  service_.set_script(script);

  const Output get = Capture([&] { return RunCommand("jobs", Args({"get", "j-3", "--json"})); });
  EXPECT_EQ(get.status, kExitOk) << get.err;  // get reports; it does not judge the state
  EXPECT_THAT(get.lines, ElementsAre(JobJson(script.job)));
  EXPECT_EQ(service_.record().id, "j-3");

  const Output cancel = Capture([&] { return RunCommand("jobs", Args({"cancel", "j-3"})); });
  EXPECT_EQ(cancel.status, kExitOk) << cancel.err;
  EXPECT_THAT(cancel.lines, ElementsAre("job j-3: CANCELLED"));

  const Output promote = Capture([&] {
    return RunCommand("promote",
                      Args({"--job", "j-3", "--last", "--model", "imdb", "--require-better"}));
  });
  EXPECT_EQ(promote.status, kExitOk) << promote.err;
  EXPECT_THAT(promote.lines,
              ElementsAre("promoted imdb version v2 (previous v1); validation accuracy 0.9 "
                          "(previous 0.8)"));
  const auto request = service_.record().promote;
  EXPECT_EQ(request.job_id(), "j-3");
  EXPECT_EQ(request.model(), "imdb");
  EXPECT_EQ(request.which(), taylorshift::v1::CHECKPOINT_CHOICE_LAST);
  EXPECT_TRUE(request.require_at_least_current_accuracy());
  EXPECT_THAT(service_.record().rpcs, ElementsAre("GetJob", "CancelJob", "PromoteCheckpoint"));
}

// Issue 45: promote --rollback calls RollbackPromotion; models --history lists the records.
TEST_F(JobsCommandsServiceTest, RollbackAndPromotionHistory) {
  FakeJobsService::Script script;
  script.promoted =
      FromText<taylorshift::v1::PromoteCheckpointResponse>(R"pb(model { name: "imdb" version: "v1" }
                                                                previous_version: "v2")pb");
  script.promotions = FromText<taylorshift::v1::ListPromotionsResponse>(
      R"pb(entries {
             model: "imdb"
             version: "v1"
             kind: "promote"
             source: "job:j-3:best"
             job_id: "j-3"
             actor: "token:77a4e2062962"
             time { seconds: 1700000000 }
             has_validation_accuracy: true
             validation_accuracy: 0.75
           }
           entries {
             model: "imdb"
             version: "v2"
             kind: "promote"
             source: "checkpoint:b.tsckpt"
             actor: "anonymous"
             time { seconds: 1700000060 }
             forced: true
           }
           entries {
             model: "imdb"
             version: "v1"
             kind: "rollback"
             source: "job:j-3:best"
             actor: "cert:CN=ops"
             time { seconds: 1700000120 }
           })pb");
  service_.set_script(script);

  const Output rollback = Capture([&] {
    return RunCommand("promote", Args({"--rollback", "--model", "imdb"}));
  });
  EXPECT_EQ(rollback.status, kExitOk) << rollback.err;
  EXPECT_THAT(rollback.lines, ElementsAre("rolled back imdb to version v1 (was v2)"));
  EXPECT_EQ(service_.record().rollback_model, "imdb");

  ConnectionFlags common;
  common.connection.server = service_.address();
  const Output table = Capture([&] { return RunPromotionHistory(common, "imdb", false); });
  EXPECT_EQ(table.status, kExitOk) << table.err;
  EXPECT_EQ(service_.record().promotions_model, "imdb");
  ASSERT_EQ(table.lines.size(), 4u);
  EXPECT_THAT(table.lines[0], StartsWith("TIME"));
  EXPECT_THAT(table.lines[1], HasSubstr("promote "));
  EXPECT_THAT(table.lines[1], HasSubstr("job:j-3:best"));
  EXPECT_THAT(table.lines[1], HasSubstr("0.7500"));
  EXPECT_THAT(table.lines[1], HasSubstr("token:77a4e2062962"));
  EXPECT_THAT(table.lines[2], HasSubstr("promote (forced)"));
  EXPECT_THAT(table.lines[3], HasSubstr("rollback"));
  EXPECT_THAT(table.lines[3], HasSubstr("cert:CN=ops"));

  const Output json = Capture([&] { return RunPromotionHistory(common, "imdb", true); });
  EXPECT_EQ(json.status, kExitOk) << json.err;
  ASSERT_EQ(json.lines.size(), 3u);
  EXPECT_THAT(json.lines[0], HasSubstr("\"actor\":\"token:77a4e2062962\""));
  EXPECT_THAT(json.lines[2], HasSubstr("\"kind\":\"rollback\""));
  EXPECT_THAT(service_.record().rpcs,
              ElementsAre("RollbackPromotion", "ListPromotions", "ListPromotions"));
}

TEST_F(JobsCommandsServiceTest, CancelSaysARunningJobIsStoppingNotRunning) {
  // CancelJob answers a running job as it is then: still RUNNING, asked to stop.
  FakeJobsService::Script script;
  script.job =
      FromText<Job>(R"pb(id: "j-5" kind: JOB_KIND_TRAINING name: "t" state: JOB_STATE_RUNNING)pb");
  service_.set_script(script);
  const Output cancel = Capture([&] { return RunCommand("jobs", Args({"cancel", "j-5"})); });
  EXPECT_EQ(cancel.status, kExitOk) << cancel.err;
  EXPECT_THAT(cancel.lines,
              ElementsAre("cancel requested; job j-5 is stopping (tsctl jobs watch j-5 follows it "
                          "to the end)"));
  const Output json = Capture([&] {
    return RunCommand("jobs", Args({"cancel", "j-5", "--json"}));
  });
  EXPECT_THAT(json.lines, ElementsAre(JobJson(script.job)));  // the server's answer, as is
  EXPECT_THAT(service_.record().rpcs, ElementsAre("CancelJob", "CancelJob"));
}

TEST_F(JobsCommandsServiceTest, PlotRefusesAnEvaluationJob) {
  FakeJobsService::Script script;
  script.job = FromText<Job>(
      R"pb(id: "j-6" kind: JOB_KIND_EVALUATION name: "e" state: JOB_STATE_SUCCEEDED)pb");
  service_.set_script(script);
  const std::string path = ::testing::TempDir() + "jobs_commands_test_eval.svg";
  std::remove(path.c_str());
  const Output out = Capture([&] {
    return RunCommand("jobs", Args({"plot", "j-6", "--out", path}));
  });
  EXPECT_EQ(out.status, kExitError);
  EXPECT_TRUE(out.lines.empty());
  EXPECT_THAT(out.err, HasSubstr("job j-6 is an evaluation: evaluations have no loss curve"));
  EXPECT_FALSE(std::ifstream(path).good()) << "no chart is written";
  EXPECT_THAT(service_.record().rpcs, ElementsAre("GetJob"));
}

TEST_F(JobsCommandsServiceTest, EvalWaitPrintsExamplesAndTheReport) {
  TempSpec spec("name: e\nmodel: imdb\ndata: {format: jsonl, path: test.jsonl}\n");
  FakeJobsService::Script script;
  const std::string base = R"pb(id: "j-2" kind: JOB_KIND_EVALUATION name: "e")pb";
  script.job = FromText<Job>(base + "state: JOB_STATE_QUEUED");
  script.events = {
      Event(JobEvent::SNAPSHOT, base + "state: JOB_STATE_QUEUED"),
      Event(JobEvent::STATE, base + "state: JOB_STATE_RUNNING"),
      Event(JobEvent::PROGRESS,
            base + "state: JOB_STATE_RUNNING progress { validation_examples: 100 }"),
      Event(JobEvent::STATE, base + R"pb(state: JOB_STATE_SUCCEEDED
                                         progress { validation_examples: 100 }
                                         report {
                                           examples: 100
                                           loss: 0.5
                                           accuracy: 0.75
                                           macro_f1: 0.7
                                           examples_per_second: 250
                                         })pb"),
  };
  service_.set_script(script);
  const Output out = Capture([&] {
    return RunCommand("eval", Args({"--spec", spec.path(), "--wait"}));
  });
  EXPECT_EQ(out.status, kExitOk) << out.err;
  EXPECT_THAT(out.lines, ElementsAre("job j-2 e (evaluation): QUEUED", "state RUNNING",
                                     "evaluating 100 examples",
                                     "state SUCCEEDED: evaluated 100/100 examples 250.0 ex/s; acc "
                                     "0.75 f1 0.7 loss 0.5 (100 examples)"));
}

// A history in pages of two entries, as a server would split it.
std::vector<taylorshift::v1::GetJobHistoryResponse> HistoryPages() {
  using taylorshift::v1::GetJobHistoryResponse;
  return {
      FromText<GetJobHistoryResponse>(R"pb(loss_curve { step: 10 loss: 2.0 }
                                           loss_curve { step: 20 loss: 1.5 }
                                           next_page_token: "1")pb"),
      FromText<GetJobHistoryResponse>(R"pb(loss_curve { step: 30 loss: 1.0 }
                                           validations { step: 30 accuracy: 0.5 }
                                           next_page_token: "2")pb"),
      FromText<GetJobHistoryResponse>(R"pb(loss_curve { step: 40 loss: 0.5 }
                                           validations { step: 40 accuracy: 0.75 })pb"),
  };
}

TEST_F(JobsCommandsServiceTest, GetCurveFollowsEveryHistoryPage) {
  FakeJobsService::Script script;
  script.job = FromText<Job>(
      R"pb(id: "j-4" kind: JOB_KIND_TRAINING name: "t" state: JOB_STATE_SUCCEEDED)pb");
  script.history_pages = HistoryPages();
  service_.set_script(script);

  const Output text = Capture([&] { return RunCommand("jobs", Args({"get", "j-4", "--curve"})); });
  EXPECT_EQ(text.status, kExitOk) << text.err;
  const auto histories = service_.record().histories;
  ASSERT_EQ(histories.size(), 3u);
  EXPECT_EQ(histories[0].id(), "j-4");
  EXPECT_EQ(histories[0].page_token(), "");
  EXPECT_EQ(histories[1].page_token(), "1");
  EXPECT_EQ(histories[2].page_token(), "2");
  EXPECT_EQ(histories[0].page_size(), 10000u);
  EXPECT_EQ(text.lines[0], "id: j-4");
  EXPECT_THAT(text.lines, ::testing::Contains(
                              "loss curve: 4 points, steps 10 to 40; loss 2 at the first, 0.5 at "
                              "the last, lowest 0.5 at step 40"));
  EXPECT_THAT(text.lines, ::testing::Contains("validation accuracy: 2 runs; best 0.75 at step 40, "
                                              "last 0.75 at step 40"));
  EXPECT_THAT(text.lines, ::testing::Contains(StartsWith("  2 |*")));  // the top row

  FakeJobsService json_service;
  json_service.Start();
  json_service.set_script(script);
  const Output json = Capture([&] {
    return RunCommand("jobs",
                      {"get", "j-4", "--curve", "--json", "--server", json_service.address()});
  });
  EXPECT_EQ(json.status, kExitOk) << json.err;
  taylorshift::v1::GetJobHistoryResponse all;
  for (const auto& page : HistoryPages()) {
    all.mutable_loss_curve()->MergeFrom(page.loss_curve());
    all.mutable_validations()->MergeFrom(page.validations());
  }
  EXPECT_THAT(json.lines, ElementsAre(JobJson(script.job, &all)));
  EXPECT_THAT(json.lines[0], HasSubstr(R"("history":{"loss_curve":[{"step":10,"loss":2,)"));
}

TEST_F(JobsCommandsServiceTest, AHistoryPageWithoutProgressIsAnError) {
  FakeJobsService::Script script;
  script.job = FromText<Job>(R"pb(id: "j-4" state: JOB_STATE_RUNNING)pb");
  // The second page is empty yet points on: following it would never end.
  script.history_pages = {
      FromText<taylorshift::v1::GetJobHistoryResponse>(R"pb(loss_curve { step: 10 loss: 2.0 }
                                                            next_page_token: "1")pb"),
      FromText<taylorshift::v1::GetJobHistoryResponse>(R"pb(next_page_token: "1")pb"),
  };
  service_.set_script(script);
  const Output out = Capture([&] { return RunCommand("jobs", Args({"get", "j-4", "--curve"})); });
  EXPECT_EQ(out.status, kExitError);
  EXPECT_THAT(out.err, HasSubstr("GetJobHistory"));
  EXPECT_THAT(out.err, HasSubstr("without progress"));
  EXPECT_EQ(service_.record().histories.size(), 2u);
}

TEST_F(JobsCommandsServiceTest, PlotWritesTheWholeHistoryAsSvg) {
  FakeJobsService::Script script;
  script.job = FromText<Job>(
      R"pb(id: "j-4" kind: JOB_KIND_TRAINING name: "tiny" state: JOB_STATE_SUCCEEDED)pb");
  script.history_pages = HistoryPages();
  service_.set_script(script);
  const std::string path = ::testing::TempDir() + "jobs_commands_test_curve.SVG";
  std::remove(path.c_str());
  const Output out = Capture([&] {
    return RunCommand("jobs", Args({"plot", "j-4", "--out", path}));
  });
  EXPECT_EQ(out.status, kExitOk) << out.err;
  EXPECT_THAT(out.lines, ElementsAre("wrote " + path + " (4 loss points, 2 validation runs)"));
  EXPECT_THAT(service_.record().rpcs,
              ElementsAre("GetJob", "GetJobHistory", "GetJobHistory", "GetJobHistory"));
  std::ifstream file(path);
  const std::string svg((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(svg, StartsWith("<?xml"));
  EXPECT_THAT(svg, HasSubstr("<title>j-4 tiny: training loss and validation accuracy</title>"));
  EXPECT_THAT(svg, HasSubstr("<polyline class=\"loss\""));
  std::remove(path.c_str());

  // .csv: the same history as data, a row per step.
  const std::string csv_path = ::testing::TempDir() + "jobs_commands_test_curve.csv";
  const Output csv_out = Capture([&] {
    return RunCommand("jobs", Args({"plot", "j-4", "--out", csv_path}));
  });
  EXPECT_EQ(csv_out.status, kExitOk) << csv_out.err;
  std::ifstream csv_file(csv_path);
  const std::string csv((std::istreambuf_iterator<char>(csv_file)),
                        std::istreambuf_iterator<char>());
  EXPECT_THAT(csv, StartsWith("step,loss,learning_rate,"));
  EXPECT_THAT(csv, HasSubstr("\n30,1,0,0,0,0.5,0\n40,0.5,0,0,0,0.75,0\n"));
  std::remove(csv_path.c_str());

  // A file that cannot be written is an error naming it.
  const std::string unwritable = ::testing::TempDir() + "no-such-dir/curve.svg";
  const Output failed = Capture([&] {
    return RunCommand("jobs", Args({"plot", "j-4", "--out", unwritable}));
  });
  EXPECT_EQ(failed.status, kExitError);
  EXPECT_THAT(failed.err, HasSubstr("cannot create " + unwritable));
}

}  // namespace
}  // namespace ts::client
