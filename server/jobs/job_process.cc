#include "server/jobs/job_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "job_contract/event_pipe.h"

extern char** environ;

namespace ts::server {
namespace pb = taylorshift::v1;

namespace {

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", signal);
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

struct JobProcess::Rank {
  int index = 0;
  pid_t pid = -1;
  int events_fd = -1;  // read ends
  int log_fd = -1;
  job::EventDecoder decoder;
  std::string log_partial;
  std::deque<std::string> log_tail;
  absl::Time last_heard;
  bool exited = false;
  int wait_status = 0;
  bool have_result = false;
  pb::WorkerResult result;
  std::string protocol_error;
};

absl::StatusOr<int> PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("picking a free port: ", error));
  }
  close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

JobProcess::JobProcess(const JobProcessOptions& options) : options_(options) {}

JobProcess::~JobProcess() {
  KillAll(SIGKILL);
  for (auto& rank : ranks_) {
    if (!rank->exited && rank->pid > 0) waitpid(rank->pid, &rank->wait_status, 0);
    CloseFd(rank->events_fd);
    CloseFd(rank->log_fd);
  }
}

std::vector<pid_t> JobProcess::pids() const {
  std::vector<pid_t> pids;
  for (const auto& rank : ranks_) pids.push_back(rank->pid);
  return pids;
}

absl::StatusOr<std::unique_ptr<JobProcess>> JobProcess::Start(const JobProcessOptions& options,
                                                              MessageHandler on_message,
                                                              LogHandler on_log) {
  if (access(options.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the worker binary ", options.binary,
                     " is not executable (jobs.worker_binary): ", std::strerror(errno)));
  }
  std::unique_ptr<JobProcess> process(new JobProcess(options));
  process->on_message_ = std::move(on_message);
  process->on_log_ = std::move(on_log);
  int port = 0;
  if (options.world_size > 1) {
    TS_ASSIGN_OR_RETURN(port, PickFreeLoopbackPort());
  }
  const pid_t parent = getpid();
  for (int r = 0; r < options.world_size; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    int events[2], logs[2];
    if (pipe2(events, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    if (pipe2(logs, O_CLOEXEC) != 0) {
      close(events[0]);
      close(events[1]);
      return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const bool ours = entry.rfind("MASTER_ADDR=", 0) == 0 ||
                        entry.rfind("MASTER_PORT=", 0) == 0 || entry.rfind("WORLD_SIZE=", 0) == 0 ||
                        entry.rfind("RANK=", 0) == 0 || entry.rfind("LOCAL_RANK=", 0) == 0 ||
                        entry.rfind("OMP_NUM_THREADS=", 0) == 0 ||
                        entry.rfind("ONEDNN_PRIMITIVE_CACHE_CAPACITY=", 0) == 0 ||
                        entry.rfind("DNNL_PRIMITIVE_CACHE_CAPACITY=", 0) == 0;
      if (!ours) env_strings.push_back(entry);
    }
    env_strings.push_back(absl::StrCat("OMP_NUM_THREADS=", std::max(options.threads, 1)));
    for (const char* name :
         {"ONEDNN_PRIMITIVE_CACHE_CAPACITY=", "DNNL_PRIMITIVE_CACHE_CAPACITY="}) {
      env_strings.push_back(
          absl::StrCat(name, std::max(options.onednn_primitive_cache_capacity, 0)));
    }
    if (options.world_size > 1) {
      env_strings.push_back("MASTER_ADDR=127.0.0.1");
      env_strings.push_back(absl::StrCat("MASTER_PORT=", port));
      env_strings.push_back(absl::StrCat("WORLD_SIZE=", options.world_size));
      env_strings.push_back(absl::StrCat("RANK=", r));
      env_strings.push_back(absl::StrCat("LOCAL_RANK=", r));
    }
    std::vector<char*> envp;
    envp.reserve(env_strings.size() + 1);
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_strings = {
        options.binary, absl::StrCat("--task=", options.task_file), "--events-fd=3"};
    std::vector<char*> argv;
    argv.reserve(arg_strings.size() + 1);
    for (auto& s : arg_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max =
        options.address_space_bytes > 0 ? options.address_space_bytes : RLIM_INFINITY;
    // SIGTERM stays blocked from fork to exec and across it: tsworker keeps it blocked in every
    // thread and takes it on a thread of its own (sigtimedwait), so a Stop() while it starts (its
    // libraries load for up to a second) waits instead of killing it before it can save its
    // state. Blocked in this thread across fork too (tsserver's threads have it blocked already).
    sigset_t term_only, previous;
    sigemptyset(&term_only);
    sigaddset(&term_only, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term_only, &previous);
    const pid_t pid = fork();
    if (pid != 0) pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    if (pid < 0) {
      const std::string error = std::strerror(errno);
      for (int fd : {events[0], events[1], logs[0], logs[1], null_fd}) close(fd);
      return absl::InternalError(absl::StrCat("fork: ", error));
    }
    if (pid == 0) {
      // The child: dies with the server, its own process group, limits, fds 0-3, exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      setpgid(0, 0);
      setrlimit(RLIMIT_AS, &limit);
      if (null_fd >= 0) dup2(null_fd, 0);
      dup2(logs[1], 1);
      dup2(logs[1], 2);
      dup2(events[1], 3);
      syscall(SYS_close_range, 4u, ~0u, 0u);
      sigprocmask(SIG_SETMASK, &term_only, nullptr);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(events[1]);
    close(logs[1]);
    if (null_fd >= 0) close(null_fd);
    rank->pid = pid;
    rank->events_fd = events[0];
    rank->log_fd = logs[0];
    rank->last_heard = options.clock->Now();
    process->ranks_.push_back(std::move(rank));
  }
  return process;
}

void JobProcess::KillAll(int signal) {
  for (auto& rank : ranks_) {
    if (!rank->exited && rank->pid > 0) kill(rank->pid, signal);
  }
}

void JobProcess::Stop() {
  if (stop_requested_.exchange(true)) return;
  KillAll(SIGTERM);
}

void JobProcess::ReadPipe(Rank& rank, int fd, bool events, const EndAll& end_all) {
  char buffer[65536];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    if (events) {
      CloseFd(rank.events_fd);
    } else {
      if (!rank.log_partial.empty()) {
        rank.log_tail.push_back(std::move(rank.log_partial));
        rank.log_partial.clear();
      }
      CloseFd(rank.log_fd);
    }
    return;
  }
  rank.last_heard = options_.clock->Now();
  if (!events) {
    rank.log_partial.append(buffer, static_cast<std::size_t>(n));
    std::size_t eol;
    while ((eol = rank.log_partial.find('\n')) != std::string::npos) {
      std::string line = rank.log_partial.substr(0, eol);
      rank.log_partial.erase(0, eol + 1);
      if (on_log_) on_log_(rank.index, line);
      rank.log_tail.push_back(std::move(line));
      while (rank.log_tail.size() > options_.log_lines_kept) rank.log_tail.pop_front();
    }
    return;
  }
  rank.decoder.Append(buffer, static_cast<std::size_t>(n));
  for (;;) {
    auto message = rank.decoder.Next();
    if (!message.ok()) {
      rank.protocol_error = std::string(message.status().message());
      CloseFd(rank.events_fd);
      end_all(rank.index, absl::StrCat("rank ", rank.index, ": ", rank.protocol_error));
      break;
    }
    if (!message->has_value()) break;
    const pb::WorkerMessage& m = **message;
    if (m.kind_case() == pb::WorkerMessage::kHeartbeat) continue;
    if (m.kind_case() == pb::WorkerMessage::kResult) {
      rank.have_result = true;
      rank.result = m.result();
    }
    if (on_message_) on_message_(m);
  }
}

JobProcessOutcome JobProcess::Outcome(const std::string& failure, int failing_rank) const {
  JobProcessOutcome outcome;
  const Rank& zero = *ranks_.front();
  const Rank* reported =
      failing_rank >= 0 ? ranks_[static_cast<std::size_t>(failing_rank)].get() : &zero;
  outcome.last_log_lines.assign(reported->log_tail.begin(), reported->log_tail.end());
  const auto exit_description = [](const Rank& rank) {
    const int ws = rank.wait_status;
    if (WIFSIGNALED(ws)) {
      return absl::StrCat("was killed by signal ", WTERMSIG(ws), " (", SignalName(WTERMSIG(ws)),
                          ")");
    }
    return absl::StrCat("exited with code ", WEXITSTATUS(ws));
  };
  if (!failure.empty()) {
    outcome.status = absl::InternalError(failure);
  } else if (stop_requested_) {
    const bool saved = zero.have_result && zero.result.stopped();
    if (zero.have_result && zero.result.code() == 0) {
      outcome.status = absl::OkStatus();  // it finished before it saw the request
    } else {
      outcome.stopped = true;
      outcome.status =
          absl::AbortedError(saved ? zero.result.message()
                                   : absl::StrCat("worker rank 0 ", exit_description(zero),
                                                  " before saving its state"));
    }
  } else if (zero.have_result) {
    outcome.status =
        absl::Status(static_cast<absl::StatusCode>(zero.result.code()), zero.result.message());
    // A rank other than 0 that failed explains a rank 0 that then failed in a collective.
    for (const auto& rank : ranks_) {
      if (rank.get() != &zero && rank->have_result && rank->result.code() != 0) {
        outcome.status =
            absl::Status(static_cast<absl::StatusCode>(rank->result.code()),
                         absl::StrCat("rank ", rank->index, ": ", rank->result.message()));
        outcome.last_log_lines.assign(rank->log_tail.begin(), rank->log_tail.end());
        break;
      }
    }
  } else {
    outcome.status =
        absl::InternalError(absl::StrCat("worker rank 0 (pid ", zero.pid, ") ",
                                         exit_description(zero), " without reporting a result"));
  }
  for (const auto& rank : ranks_) {
    const int ws = rank->wait_status;
    if (!rank->have_result || !rank->exited || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)) continue;
    // Exit code 1 after a failed result is the worker's own way to say it failed.
    if (WIFEXITED(ws) && rank->result.code() != 0 && !rank->result.stopped()) continue;
    outcome.exit_problem = absl::StrCat("worker rank ", rank->index, " (pid ", rank->pid,
                                        ") reported its result, then ", exit_description(*rank));
    break;
  }
  if (!outcome.status.ok() && !outcome.stopped && !outcome.last_log_lines.empty()) {
    std::vector<std::string> tail(
        outcome.last_log_lines.end() - std::min<std::size_t>(outcome.last_log_lines.size(), 3),
        outcome.last_log_lines.end());
    outcome.status = absl::Status(
        outcome.status.code(),
        absl::StrCat(outcome.status.message(), "; last log lines: ", absl::StrJoin(tail, " | ")));
  }
  return outcome;
}

JobProcessOutcome JobProcess::Wait() {
  std::string failure;  // the first reason the supervisor ended the job
  int failing_rank = -1;
  bool killed = false;
  absl::Time stop_sent = absl::InfiniteFuture();
  const EndAll end_all = [&](int rank, const std::string& reason) {
    if (failure.empty()) {
      failure = reason;
      failing_rank = rank;
    }
    if (!killed) {
      killed = true;
      KillAll(SIGKILL);
    }
  };

  for (;;) {
    if (stop_requested_ && stop_sent == absl::InfiniteFuture()) stop_sent = options_.clock->Now();
    if (stop_sent != absl::InfiniteFuture() && !killed &&
        options_.clock->Now() - stop_sent > options_.stop_grace) {
      killed = true;
      KillAll(SIGKILL);
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> owners;  // (rank, is events fd)
    for (auto& rank : ranks_) {
      if (rank->events_fd >= 0) {
        fds.push_back({rank->events_fd, POLLIN, 0});
        owners.emplace_back(rank.get(), true);
      }
      if (rank->log_fd >= 0) {
        fds.push_back({rank->log_fd, POLLIN, 0});
        owners.emplace_back(rank.get(), false);
      }
    }
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), 100);
    } else {
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ReadPipe(*owners[i].first, fds[i].fd, owners[i].second, end_all);
    }
    // Exits.
    bool all_exited = true;
    for (auto& rank : ranks_) {
      if (!rank->exited) {
        const pid_t done = waitpid(rank->pid, &rank->wait_status, WNOHANG);
        if (done == rank->pid) {
          rank->exited = true;
          // Whatever the pipes still hold is read on the next rounds.
        }
      }
      all_exited = all_exited && rank->exited;
      if (rank->exited && !killed && !stop_requested_) {
        const int ws = rank->wait_status;
        const bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
        // A rank that failed on its own ends the others (they would wait for it).
        if (WIFSIGNALED(ws)) {
          end_all(rank->index, absl::StrCat("worker rank ", rank->index, " (pid ", rank->pid,
                                            ") was killed by signal ", WTERMSIG(ws), " (",
                                            SignalName(WTERMSIG(ws)), ")",
                                            WTERMSIG(ws) == SIGKILL
                                                ? "; out of memory (the kernel's OOM killer) or "
                                                  "killed from outside"
                                                : ""));
        } else if (!clean && ranks_.size() > 1) {
          end_all(rank->index, "");
        }
      }
      if (!rank->exited && !killed &&
          options_.clock->Now() - rank->last_heard > options_.heartbeat_timeout) {
        end_all(rank->index, absl::StrCat("worker rank ", rank->index, " (pid ", rank->pid,
                                          ") sent no heartbeat for ",
                                          absl::FormatDuration(options_.heartbeat_timeout),
                                          " (hung or stopped); killed"));
      }
    }
    bool pipes_open = false;
    for (auto& rank : ranks_) pipes_open = pipes_open || rank->events_fd >= 0 || rank->log_fd >= 0;
    if (all_exited && !pipes_open) break;
    // A grandchild holding a pipe open must not keep the job alive once every rank is gone.
    if (all_exited) {
      static constexpr absl::Duration kDrain = absl::Seconds(2);
      bool any_heard_recently = false;
      for (auto& rank : ranks_)
        any_heard_recently |= options_.clock->Now() - rank->last_heard < kDrain;
      if (!any_heard_recently) break;
    }
  }

  return Outcome(failure, failing_rank);
}

}  // namespace ts::server
