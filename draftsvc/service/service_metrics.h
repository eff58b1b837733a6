// draftsvc's metrics: the series the RPC handlers update (ServiceMetrics)
// and the scrape-time callbacks over the index, the store and the
// assistant, registered once at start (DraftServerOptions::metrics lists
// them all).
//
// Thread-safety: the registered callbacks read their objects through their
// own thread-safe accessors; ServiceMetrics' series are thread-safe.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_SERVICE_METRICS_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_SERVICE_METRICS_H_

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "draftsvc/index/draft_index.h"
#include "draftsvc/service/draft_service.h"
#include "draftsvc/storage/trie_store.h"

namespace lookahead::draftsvc {

class AssistantSource;

// The series the service itself updates (the rest are scrape-time
// callbacks); null members when metrics are off.
struct ServiceMetrics {
  metrics::Counter* inserted_tokens = nullptr;
  metrics::Histogram* retrieval_seconds = nullptr;
  metrics::Histogram* assistant_draft_seconds = nullptr;  // With an assistant.
};

// Registers the scrape-time series of `index`/`store` and creates the ones
// the service updates. Every pointer is not owned and must outlive the
// registry's scrapes. `assistant` may be null (its series are then not
// registered). Registry errors (a name registered twice) pass through.
absl::StatusOr<ServiceMetrics> RegisterMetrics(metrics::Registry* registry,
                                               DraftIndex* index,
                                               TrieStore* store,
                                               const AssistantSource* assistant,
                                               const RebuildStats* rebuild);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_SERVICE_METRICS_H_
