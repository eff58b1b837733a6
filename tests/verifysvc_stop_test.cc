// The real verifysvc binary stopped by SIGTERM at every moment of its life:
// reading flags, loading the model, measuring the step cost, serving. Each
// stop is orderly: exit code 0 (common/shutdown_signal.h) and never absl's
// failure banner ("*** SIGTERM received ... PC: @"), which in a rolling
// update reads as a crash.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace lookahead::testing {
namespace {

std::string WorkDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/verifysvc_stop");
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(VerifysvcStopTest, SigtermInEveryPhaseIsAnOrderlyStop) {
  const char* binary = std::getenv("VERIFYSVC_BINARY");
  ASSERT_NE(binary, nullptr) << "set VERIFYSVC_BINARY";
  const std::string work = WorkDir();
  int stopped_while_starting = 0;
  for (int delay_ms : {0, 30, 150, 400, 800, 1500}) {
    const std::string what = absl::StrCat("delay", delay_ms);
    ServerProcess p({binary, "--host=127.0.0.1", "--port=0", "--http_port=0",
                     "--metrics_port=0", "--draftsvc="},
                    absl::StrCat(work, "/port.", what),
                    absl::StrCat(work, "/server.", what, ".log"));
    // From main() on; before it, the dynamic loader maps LibTorch (about
    // a second) and SIGTERM's default action ends the process (status 143
    // in a shell, no output).
    ASSERT_TRUE(p.WaitUntilCatches(SIGTERM)) << what << ":\n" << p.Log();
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    const int status = p.Kill(SIGTERM);
    const std::string log = p.Log();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << what << ": status " << status << ":\n"
        << log;
    EXPECT_EQ(log.find("SIGTERM received"), std::string::npos) << log;
    EXPECT_EQ(log.find("PC: @"), std::string::npos) << log;
    if (log.find("verifysvc: signal 15 while ") != std::string::npos) {
      ++stopped_while_starting;
    }
  }
  // The model takes well over 30 ms to load: some stops came mid-start.
  EXPECT_GT(stopped_while_starting, 0);

  // Serving: the graceful path, also exit code 0.
  ServerProcess serving({binary, "--host=127.0.0.1", "--port=0",
                         "--http_port=0", "--metrics_port=0", "--draftsvc="},
                        work + "/port.serving", work + "/server.serving.log");
  ASSERT_GT(serving.WaitForPort(120000), 0) << serving.Log();
  const int status = serving.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ":\n"
                                                             << serving.Log();
  EXPECT_NE(serving.Log().find("verifysvc: stopped after"), std::string::npos)
      << serving.Log();
}

}  // namespace
}  // namespace lookahead::testing
