#include "server/jobs/process_worker_launcher.h"

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

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "job_contract/event_pipe.h"

extern char** environ;

namespace ts::server {
namespace pb = taylorshift::v1;

namespace {

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The environment of rank `rank`: this process's, with the variables the launcher sets replaced.
std::vector<std::string> RankEnvironment(const WorkerLaunchOptions& options, int rank, int port) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const bool ours = entry.rfind("MASTER_ADDR=", 0) == 0 || entry.rfind("MASTER_PORT=", 0) == 0 ||
                      entry.rfind("WORLD_SIZE=", 0) == 0 || entry.rfind("RANK=", 0) == 0 ||
                      entry.rfind("LOCAL_RANK=", 0) == 0 ||
                      entry.rfind("OMP_NUM_THREADS=", 0) == 0 ||
                      entry.rfind("ONEDNN_PRIMITIVE_CACHE_CAPACITY=", 0) == 0 ||
                      entry.rfind("DNNL_PRIMITIVE_CACHE_CAPACITY=", 0) == 0;
    if (!ours) env_strings.push_back(entry);
  }
  env_strings.push_back(absl::StrCat("OMP_NUM_THREADS=", std::max(options.threads, 1)));
  for (const char* name : {"ONEDNN_PRIMITIVE_CACHE_CAPACITY=", "DNNL_PRIMITIVE_CACHE_CAPACITY="}) {
    env_strings.push_back(absl::StrCat(name, std::max(options.onednn_primitive_cache_capacity, 0)));
  }
  if (options.world_size > 1) {
    env_strings.push_back("MASTER_ADDR=127.0.0.1");
    env_strings.push_back(absl::StrCat("MASTER_PORT=", port));
    env_strings.push_back(absl::StrCat("WORLD_SIZE=", options.world_size));
    env_strings.push_back(absl::StrCat("RANK=", rank));
    env_strings.push_back(absl::StrCat("LOCAL_RANK=", rank));
  }
  return env_strings;
}

// The tsworker processes of one attempt.
class WorkerProcesses final : public WorkerHandle {
 public:
  // Forks and executes rank `rank` (see the launcher's comment).
  absl::Status StartRank(const WorkerLaunchOptions& options, int rank, int port);

  ~WorkerProcesses() override;
  std::vector<pid_t> pids() const override;
  std::vector<WorkerEvent> Next(absl::Time deadline) override;
  void SignalAll(WorkerSignal signal) override;

 private:
  struct Rank {
    int index = 0;
    pid_t pid = -1;
    int events_fd = -1;  // read ends
    int log_fd = -1;
    job::EventDecoder decoder;
    std::string log_partial;
  };

  // Reads what `fd` (the rank's events pipe, or its stderr) holds now into `events`.
  static void ReadPipe(Rank& rank, int fd, bool is_events, std::vector<WorkerEvent>& events);

  std::vector<std::unique_ptr<Rank>> ranks_;  // fixed once Launch returns
  // Reaping and signalling: a reaped pid may be reused, so no signal goes to it after waitpid.
  mutable absl::Mutex mu_;
  std::vector<bool> exited_ ABSL_GUARDED_BY(mu_);
};

WorkerProcesses::~WorkerProcesses() {
  absl::MutexLock lock(&mu_);
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = *ranks_[r];
    if (!exited_[r] && rank.pid > 0) {
      kill(rank.pid, SIGKILL);
      int wait_status = 0;
      waitpid(rank.pid, &wait_status, 0);
    }
    CloseFd(rank.events_fd);
    CloseFd(rank.log_fd);
  }
}

std::vector<pid_t> WorkerProcesses::pids() const {
  std::vector<pid_t> pids;
  for (const auto& rank : ranks_) pids.push_back(rank->pid);
  return pids;
}

absl::Status WorkerProcesses::StartRank(const WorkerLaunchOptions& options, int r, int port) {
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
  std::vector<std::string> env_strings = RankEnvironment(options, r, port);
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
  const pid_t parent = getpid();
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
  ranks_.push_back(std::move(rank));
  absl::MutexLock lock(&mu_);
  exited_.push_back(false);
  return absl::OkStatus();
}

void WorkerProcesses::SignalAll(WorkerSignal signal) {
  const int number = signal == WorkerSignal::kKill ? SIGKILL : SIGTERM;
  absl::MutexLock lock(&mu_);
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    if (!exited_[r] && ranks_[r]->pid > 0) kill(ranks_[r]->pid, number);
  }
}

void WorkerProcesses::ReadPipe(Rank& rank, int fd, bool is_events,
                               std::vector<WorkerEvent>& events) {
  const auto event = [&](WorkerEvent::Kind kind) -> WorkerEvent& {
    events.push_back(WorkerEvent{rank.index, kind, {}, {}, {}});
    return events.back();
  };
  char buffer[65536];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    if (is_events) {
      CloseFd(rank.events_fd);
      event(WorkerEvent::Kind::kEventsClosed);
    } else {
      CloseFd(rank.log_fd);
      event(WorkerEvent::Kind::kLogClosed).text = std::exchange(rank.log_partial, "");
    }
    return;
  }
  const std::size_t before = events.size();
  if (!is_events) {
    rank.log_partial.append(buffer, static_cast<std::size_t>(n));
    std::size_t eol;
    while ((eol = rank.log_partial.find('\n')) != std::string::npos) {
      event(WorkerEvent::Kind::kLogLine).text = rank.log_partial.substr(0, eol);
      rank.log_partial.erase(0, eol + 1);
    }
  } else {
    rank.decoder.Append(buffer, static_cast<std::size_t>(n));
    for (;;) {
      auto message = rank.decoder.Next();
      if (!message.ok()) {
        CloseFd(rank.events_fd);
        event(WorkerEvent::Kind::kProtocolError).text = std::string(message.status().message());
        break;
      }
      if (!message->has_value()) break;
      event(WorkerEvent::Kind::kMessage).message = std::move(**message);
    }
  }
  if (events.size() == before) event(WorkerEvent::Kind::kActivity);
}

std::vector<WorkerEvent> WorkerProcesses::Next(absl::Time /*deadline*/) {
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
  std::vector<WorkerEvent> events;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    ReadPipe(*owners[i].first, fds[i].fd, owners[i].second, events);
  }
  // Exits; whatever the pipes still hold is read on the next calls.
  absl::MutexLock lock(&mu_);
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    if (exited_[r]) continue;
    int ws = 0;
    if (waitpid(ranks_[r]->pid, &ws, WNOHANG) != ranks_[r]->pid) continue;
    exited_[r] = true;
    WorkerEvent& exited = events.emplace_back();
    exited.rank = static_cast<int>(r);
    exited.kind = WorkerEvent::Kind::kExited;
    if (WIFSIGNALED(ws)) {
      exited.exit.signal = WTERMSIG(ws);
    } else {
      exited.exit.code = WEXITSTATUS(ws);
    }
  }
  return events;
}

// A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT).
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

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerHandle>> ProcessWorkerLauncher::Launch(
    const WorkerLaunchOptions& options) {
  if (access(options.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the worker binary ", options.binary,
                     " is not executable (jobs.worker_binary): ", std::strerror(errno)));
  }
  int port = 0;
  if (options.world_size > 1) {
    TS_ASSIGN_OR_RETURN(port, PickFreeLoopbackPort());
  }
  auto processes = std::make_unique<WorkerProcesses>();
  for (int r = 0; r < options.world_size; ++r) {
    TS_RETURN_IF_ERROR(processes->StartRank(options, r, port));
  }
  return processes;
}

}  // namespace ts::server
