// StorageHealthReporter: logs the trie store's degraded/recovered
// transitions to stderr and mirrors them into the gRPC health service as
// kStorageHealthService (draft_service.h).
//
// Thread-safety: all methods are safe to call concurrently; OnChange is
// called from the store's writer thread.
#ifndef LOOKAHEAD_DRAFTSVC_SERVICE_STORAGE_HEALTH_H_
#define LOOKAHEAD_DRAFTSVC_SERVICE_STORAGE_HEALTH_H_

#include <grpcpp/health_check_service_interface.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "draftsvc/storage/trie_store.h"

namespace lookahead::draftsvc {

class StorageHealthReporter {
 public:
  // `db_path` names the store in the log lines.
  explicit StorageHealthReporter(std::string db_path)
      : db_path_(std::move(db_path)) {}

  // The store's health changed to `h` (TrieStoreOptions::on_health_change).
  void OnChange(const StoreHealth& h);
  // `health` (may be null: detach) gets the state from now on, starting
  // with `store`'s (read under the lock, so that a transition racing with
  // this call is reported after it, never lost). Once this returns with
  // null, no call reaches the previous `health`.
  void Attach(grpc::HealthCheckServiceInterface* health,
              const TrieStore* store);

 private:
  const std::string db_path_;
  absl::Mutex mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t repersisted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SERVICE_STORAGE_HEALTH_H_
