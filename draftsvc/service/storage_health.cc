#include "draftsvc/service/storage_health.h"

#include <cstdio>

#include "draftsvc/service/draft_service.h"

namespace lookahead::draftsvc {

void StorageHealthReporter::OnChange(const StoreHealth& h) {
  absl::MutexLock lock(&mu_);
  if (h.degraded) {
    std::fprintf(stderr,
                 "draftsvc: storage DEGRADED (read-only): serving drafts "
                 "from memory, trie updates are not persisted until %s can "
                 "be written again (retrying): %s\n",
                 db_path_.c_str(), h.error.c_str());
  } else {
    std::fprintf(
        stderr,
        "draftsvc: storage writable again (recovery %lld): "
        "re-persisted %lld trie mutations accepted while "
        "degraded\n",
        static_cast<long long>(h.recoveries),
        static_cast<long long>(h.repersisted_mutations - repersisted_));
    repersisted_ = h.repersisted_mutations;
  }
  std::fflush(stderr);
  if (health_ != nullptr) {
    health_->SetServingStatus(kStorageHealthService, !h.degraded);
  }
}

void StorageHealthReporter::Attach(grpc::HealthCheckServiceInterface* health,
                                   const TrieStore* store) {
  absl::MutexLock lock(&mu_);
  health_ = health;
  if (health_ != nullptr) {
    health_->SetServingStatus(kStorageHealthService,
                              store == nullptr || !store->degraded());
  }
}

}  // namespace lookahead::draftsvc
