// ShutdownSignal: SIGTERM and SIGINT for a server's whole life, so that an
// orderly stop never reads as a crash, whatever phase it arrives in.
//
// Construct it first thing in main(), right after
// absl::InstallFailureSignalHandler (it takes the two signals back from that
// handler). Its handler only writes the signal's number to a pipe, so any
// thread may take the signal, those that libraries start before main()
// (OpenBLAS) included; a thread of its own reads the pipe. Until Wait() is
// called (the server is starting: loading a model, recovering a store), a
// signal ends the process at once with kExitStopped and one line on stdout:
// there is nothing to finish, and everything a start writes is crash-safe.
// From Wait() on, the signal is Wait()'s return value and the server stops
// gracefully; further signals are ignored (the orchestrator's SIGKILL ends a
// stop that takes too long).
//
// Exit codes shared by draftsvc and verifysvc (docs/operations.md):
//   kExitStopped (0)      stopped by SIGTERM/SIGINT, in any phase;
//   kExitFailed (1)       could not start, or failed while serving: the
//                         reason is the last line on stderr;
//   kExitUnpersisted (3)  draftsvc only: stopped by a signal while its store
//                         was degraded; the updates it could not write are
//                         lost (their count is on stderr).
// A crash dies by its signal (128+N in a shell) after absl's stack trace.
// One per process; not copyable.
#ifndef LOOKAHEAD_COMMON_SHUTDOWN_SIGNAL_H_
#define LOOKAHEAD_COMMON_SHUTDOWN_SIGNAL_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace lookahead {

inline constexpr int kExitStopped = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUnpersisted = 3;

class ShutdownSignal {
 public:
  // `program` prefixes the line printed when a signal ends a start.
  explicit ShutdownSignal(std::string program);
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;
  // The signal thread is detached: it only ever waits on the pipe.
  ~ShutdownSignal() = default;

  // Names what the server is doing while it starts ("loading the model"),
  // for the line a signal prints then. First: "reading the flags".
  void SetPhase(std::string phase);

  // The server now serves: blocks until SIGTERM or SIGINT arrives (or has
  // arrived since) and returns its number.
  int Wait();

 private:
  void Watch();

  const std::string program_;
  int pipe_read_ = -1;
  absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  int received_ ABSL_GUARDED_BY(mu_) = 0;
  std::string phase_ ABSL_GUARDED_BY(mu_) = "reading the flags";
};

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_SHUTDOWN_SIGNAL_H_
