// Real service binaries as child processes of a cross-service test.
// ChildProcess: stdout+stderr go to a log file; the destructor SIGKILLs the
// process if it still runs. ServerProcess: also passes --port_file and reads
// back the port the server bound once serving. Thread-compatible.
#ifndef LOOKAHEAD_TESTS_SERVER_PROCESS_H_
#define LOOKAHEAD_TESTS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace lookahead::testing {

class ChildProcess {
 public:
  // Spawns `args` (args[0] is the binary). A spawn failure shows as
  // Running() == false.
  ChildProcess(std::vector<std::string> args, std::string log_file);
  ~ChildProcess();  // SIGKILLs a process still running.
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // True iff the process is still running.
  bool Running();
  // Sends `signal` (0: none) and reaps the process; returns its wait status.
  int Kill(int signal);
  // Sends `signal` (e.g. SIGSTOP, SIGCONT) without waiting for the process.
  void Signal(int signal);
  // Waits up to `timeout_ms` until the process has a handler for `signal`
  // (its main() has begun; before that the dynamic loader runs and the
  // signal's default action applies). False if it died or time ran out.
  bool WaitUntilCatches(int signal, int timeout_ms = 30000);
  // The process's output so far.
  std::string Log() const;
  // Its pid while it runs (until reaped), else -1.
  pid_t pid() const { return pid_; }

 private:
  const std::string log_file_;
  pid_t pid_ = -1;
  int status_ = -1;
};

class ServerProcess : public ChildProcess {
 public:
  // Spawns `args` with "--port_file=<port_file>" appended.
  ServerProcess(std::vector<std::string> args, const std::string& port_file,
                std::string log_file);

  // Waits up to `timeout_ms` for the port file; returns the port, or 0 if
  // the process died or the time ran out (see Log()).
  int WaitForPort(int timeout_ms = 30000);

 private:
  const std::string port_file_;
};

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_SERVER_PROCESS_H_
