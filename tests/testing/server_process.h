// Starts a real `tsserver` process on loopback (port 0: the server picks a free port and writes
// it to a ready file), and stops it by its PID. Loops are bounded in time.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ts::testing {

class ServerProcess {
 public:
  // Starts `binary` with `args` plus --ready-file; waits up to `timeout` for it to serve.
  bool Start(const std::string& binary, std::vector<std::string> args, const std::string& dir,
             std::chrono::seconds timeout = std::chrono::seconds(120)) {
    ready_file_ = dir + "/ready-" + std::to_string(++starts_);
    grpc_address_.clear();  // a restart must wait for the new process's address
    metrics_address_.clear();
    http_address_.clear();
    log_file_ = dir + "/server-" + std::to_string(starts_) + ".log";
    args.insert(args.begin(), binary);
    args.push_back("--ready-file");
    args.push_back(ready_file_);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream ready(ready_file_);
      std::string line;
      while (std::getline(ready, line)) {
        if (line.rfind("grpc=", 0) == 0) grpc_address_ = line.substr(5);
        if (line.rfind("metrics=", 0) == 0) metrics_address_ = line.substr(8);
        if (line.rfind("http=", 0) == 0) http_address_ = line.substr(5);
      }
      if (!grpc_address_.empty()) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        ADD_FAILURE() << "tsserver exited during start-up:\n" << Log();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "tsserver did not become ready in time:\n" << Log();
    return false;
  }

  // Sends `signal` and waits up to `timeout` for exit; returns the exit status (-1 on timeout,
  // after which the process is killed).
  int Stop(int signal = SIGTERM, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, signal);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }

  ~ServerProcess() {
    if (pid_ > 0) Stop(SIGKILL, std::chrono::seconds(10));
  }

  std::string Log() const {
    std::ifstream in(log_file_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  // The HTTP front end's address; empty unless the config enables it (http.listen).
  const std::string& http_address() const { return http_address_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int starts_ = 0;
  std::string ready_file_, log_file_, grpc_address_, metrics_address_, http_address_;
};

// Output of a shell command (stdout and stderr together).
struct CommandOutput {
  int exit_code = -1;
  std::vector<std::string> lines;
  std::string text;
};

// Runs `command` through /bin/sh and collects its output and exit status.
inline CommandOutput RunCommand(const std::string& command) {
  CommandOutput out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out.text += buffer;
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream lines(out.text);
  for (std::string line; std::getline(lines, line);) out.lines.push_back(line);
  return out;
}

// `method` http://address/path over loopback (HTTP/1.0, `timeout_s` socket timeouts) with
// `headers` (each "Name: value") and `body`; returns the whole response (status line, headers,
// body), or "" on any error. `sent`, when given, runs once the request is written.
inline std::string HttpResponse(const std::string& address, const std::string& method,
                                const std::string& path, const std::vector<std::string>& headers,
                                const std::string& body, int timeout_s = 10,
                                const std::function<void()>& sent = {}) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return "";
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string request = method + " " + path + " HTTP/1.0\r\nHost: " + address + "\r\n";
    for (const std::string& header : headers) request += header + "\r\n";
    if (!body.empty()) request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    request += "\r\n" + body;
    if (::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      if (sent) sent();
      char buffer[65536];
      ssize_t n = 0;
      while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
    }
  }
  ::close(fd);
  return response;
}

// GET http://address/path over loopback (HTTP/1.0, 10 s timeouts) with `headers` (each
// "Name: value"); returns the whole response (status line, headers, body), or "" on any error.
inline std::string HttpGetResponse(const std::string& address, const std::string& path,
                                   const std::vector<std::string>& headers = {}) {
  return HttpResponse(address, "GET", path, headers, "");
}

// The status code of a response HttpGetResponse returned (0 when there is none).
inline int HttpStatus(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.c_str() + 9);
}

// GET http://address/path as HttpGetResponse; returns the body, or "" on any error.
inline std::string HttpGet(const std::string& address, const std::string& path) {
  const std::string response = HttpGetResponse(address, path);
  const auto body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace ts::testing
