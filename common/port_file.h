// WritePortFile: tells a parent process (test, script) which port a server
// bound when started with --port=0. The file appears atomically (written to
// "<path>.tmp", then renamed), so a reader never sees a partial number.
#ifndef LOOKAHEAD_COMMON_PORT_FILE_H_
#define LOOKAHEAD_COMMON_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace lookahead {

// Writes "<port>\n" to `path`. INTERNAL naming the file on failure.
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace lookahead

#endif  // LOOKAHEAD_COMMON_PORT_FILE_H_
