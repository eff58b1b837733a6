#include "tests/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

extern char** environ;

namespace lookahead::testing {
namespace {

std::vector<std::string> WithPortFile(std::vector<std::string> args,
                                      const std::string& port_file) {
  ::unlink(port_file.c_str());
  args.push_back("--port_file=" + port_file);
  return args;
}

}  // namespace

ChildProcess::ChildProcess(std::vector<std::string> args, std::string log_file)
    : log_file_(std::move(log_file)) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_file_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) !=
      0) {
    pid_ = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) Kill(SIGKILL);
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    status_ = status;
    return false;
  }
  return true;
}

int ChildProcess::Kill(int signal) {
  if (pid_ <= 0) return status_;
  if (signal != 0) ::kill(pid_, signal);
  waitpid(pid_, &status_, 0);
  pid_ = -1;
  return status_;
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

bool ChildProcess::WaitUntilCatches(int signal, int timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const uint64_t bit = uint64_t{1} << (signal - 1);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Running()) return false;
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigCgt:", 0) == 0 &&
          (std::stoull(line.substr(7), nullptr, 16) & bit) != 0) {
        return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

std::string ChildProcess::Log() const {
  std::ifstream in(log_file_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ServerProcess::ServerProcess(std::vector<std::string> args,
                             const std::string& port_file, std::string log_file)
    : ChildProcess(WithPortFile(std::move(args), port_file),
                   std::move(log_file)),
      port_file_(port_file) {}

int ServerProcess::WaitForPort(int timeout_ms) {
  for (int waited = 0; waited < timeout_ms && Running(); waited += 10) {
    std::ifstream in(port_file_);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

}  // namespace lookahead::testing
