#include "common/shutdown_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

namespace lookahead {
namespace {

int signal_pipe_write = -1;  // Set once, before the handler is installed.

// Async-signal-safe: one write(2) of the signal's number.
void OnShutdownSignal(int signal) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  if (::write(signal_pipe_write, &byte, 1) < 0) {
    // Nothing safe to do here; the pipe holds plenty of earlier signals.
  }
  errno = saved_errno;
}

}  // namespace

ShutdownSignal::ShutdownSignal(std::string program)
    : program_(std::move(program)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "%s: cannot create the signal pipe: %s\n",
                 program_.c_str(), std::strerror(errno));
    std::_Exit(kExitFailed);
  }
  pipe_read_ = fds[0];
  signal_pipe_write = fds[1];
  struct sigaction action = {};
  action.sa_handler = OnShutdownSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  std::thread([this] { Watch(); }).detach();
}

void ShutdownSignal::SetPhase(std::string phase) {
  absl::MutexLock lock(&mu_);
  phase_ = std::move(phase);
}

int ShutdownSignal::Wait() {
  absl::MutexLock lock(&mu_);
  serving_ = true;
  mu_.Await(absl::Condition(
      +[](int* received) { return *received != 0; }, &received_));
  return received_;
}

void ShutdownSignal::Watch() {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t n = ::read(pipe_read_, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return;  // Cannot happen: the write end is never closed.
    const int signal = byte;
    absl::MutexLock lock(&mu_);
    if (!serving_) {
      // Nothing to finish: the start is abandoned as a crash would leave
      // it, which every start tolerates, but with an orderly exit code.
      std::printf("%s: signal %d while %s, stopped\n", program_.c_str(), signal,
                  phase_.c_str());
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(kExitStopped);
    }
    if (received_ == 0) received_ = signal;
  }
}

}  // namespace lookahead
