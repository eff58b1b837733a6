// ShutdownSignal: SIGTERM and SIGINT taken synchronously by a server's main
// thread. Construct it before any other thread exists (the signals are then
// blocked in every thread the process creates), and Wait() where the server
// should begin its graceful shutdown. Not copyable; one per process.
#ifndef LOOKAHEAD_COMMON_SHUTDOWN_SIGNAL_H_
#define LOOKAHEAD_COMMON_SHUTDOWN_SIGNAL_H_

#include <pthread.h>

#include <csignal>

namespace lookahead {

class ShutdownSignal {
 public:
  ShutdownSignal() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // Blocks until SIGTERM or SIGINT arrives; returns its number.
  int Wait() {
    int signal = 0;
    sigwait(&signals_, &signal);
    return signal;
  }

 private:
  sigset_t signals_;
};

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_SHUTDOWN_SIGNAL_H_
