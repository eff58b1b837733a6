// ServerProcess: a real service binary started as a child process for a
// cross-service test, with stdout+stderr in a log file and the bound port
// read from the --port_file it writes once serving. The destructor SIGKILLs
// it if it still runs. Thread-compatible.
#ifndef LOOKAHEAD_TESTS_SERVER_PROCESS_H_
#define LOOKAHEAD_TESTS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace lookahead::testing {

class ServerProcess {
 public:
  // Spawns `args` (args[0] is the binary) with "--port_file=<port_file>"
  // appended. A spawn failure shows as WaitForPort() == 0.
  ServerProcess(std::vector<std::string> args, std::string port_file,
                std::string log_file);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Waits up to `timeout_ms` for the port file; returns the port, or 0 if
  // the process died or the time ran out (see Log()).
  int WaitForPort(int timeout_ms = 30000);
  // True iff the process is still running.
  bool Running();
  // Sends `signal` (0: none) and reaps the process; returns its wait status.
  int Kill(int signal);
  // The process's output so far.
  std::string Log() const;

 private:
  const std::string port_file_;
  const std::string log_file_;
  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace lookahead::testing

#endif  // LOOKAHEAD_TESTS_SERVER_PROCESS_H_
