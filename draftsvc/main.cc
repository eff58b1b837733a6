// draftsvc: serves lookahead.v1.DraftService over gRPC, with the standard
// health service and server reflection. SIGTERM/SIGINT shut it down
// gracefully: in-flight RPCs finish, queued trie writes are flushed and
// fsynced, RocksDB is closed. A signal during recovery ends the start at
// once. Exit codes: common/shutdown_signal.h; flags: service/config.cc.
#include "draftsvc/service/server_main.h"

int main(int argc, char** argv) {
  return lookahead::draftsvc::DraftsvcMain(argc, argv, /*customize=*/{});
}
