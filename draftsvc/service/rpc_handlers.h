// The lookahead.v1.DraftService handlers (gRPC callback API) over
// DraftServer's index and store: each RPC parses its request (UTF-8
// first), converts it (proto_conversion.h), drives the index (which drives
// every source, the assistant included: index/session_source.h), and
// finishes exactly once, in sync mode from the store's durability
// callbacks.
//
// Thread-safety: handles RPCs concurrently; no reaction blocks on disk.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_RPC_HANDLERS_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_RPC_HANDLERS_H_

#include <grpcpp/impl/service_type.h>

#include <memory>

#include "draftsvc/index/draft_index.h"
#include "draftsvc/service/draft_service.h"
#include "draftsvc/service/service_metrics.h"
#include "draftsvc/storage/trie_store.h"

namespace lookahead::draftsvc {

// The service to register with a grpc::ServerBuilder. Not owned: every
// reference must outlive it; `rebuild` is read by each Stats.
std::unique_ptr<grpc::Service> NewDraftRpcService(
    const DraftServerOptions& options, DraftIndex& index, TrieStore& store,
    const RebuildStats& rebuild, ServiceMetrics metrics);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_RPC_HANDLERS_H_
