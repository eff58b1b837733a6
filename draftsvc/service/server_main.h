// draftsvc from start to stop: its flags (config.h), the store, the
// service, /metrics, and the stop on SIGTERM/SIGINT. main.cc calls it; so
// does the testonly draftsvc_fault_testing, which adds a fault-injecting
// file system through `customize`.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_SERVER_MAIN_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_SERVER_MAIN_H_

#include <functional>

#include "draftsvc/service/draft_service.h"

namespace lookahead::draftsvc {

// Adjusts the options the flags produced, before anything opens.
using OptionsHook = std::function<void(DraftServerOptions*)>;

// Parses the flags, serves until a signal, and returns the process's exit
// code (common/shutdown_signal.h). `customize` may be empty.
int DraftsvcMain(int argc, char** argv, const OptionsHook& customize);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_SERVER_MAIN_H_
