#include "draftsvc/service/service_metrics.h"

#include <cstdint>
#include <vector>

#include "common/status_macros.h"
#include "draftsvc/mix/draft_tree_builder.h"
#include "draftsvc/service/assistant_source.h"

namespace lookahead::draftsvc {
namespace {

// The `source` label of the per-source series.
const char* SourceLabel(CandidateSource source) {
  switch (source) {
    case CandidateSource::kPrompt:
      return "prompt";
    case CandidateSource::kOutput:
      return "output";
    case CandidateSource::kNgram:
      return "ngram";
    case CandidateSource::kAssistant:
      return "assistant";
  }
  return "unknown";
}

// The sessions and each namespace's global trie.
absl::Status RegisterIndexMetrics(metrics::Registry* registry,
                                  DraftIndex* index) {
  using metrics::LabeledValue;
  auto per_namespace = [index](int64_t NamespaceStats::*field) {
    return [index, field] {
      std::vector<LabeledValue> values;
      for (const NamespaceStats& s : index->Stats("")) {
        values.push_back({{s.name_space}, double(s.*field)});
      }
      return values;
    };
  };
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_draft_sessions", "Open draft sessions.", [index] {
        int64_t open = 0;
        for (const NamespaceStats& s : index->Stats("")) {
          open += s.open_sessions;
        }
        return double(open);
      }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_draft_sessions_expired_total",
      "Draft sessions closed by draftsvc because nobody used them for "
      "--session_lease_s (their verifier died, stalled or lost the network).",
      [index] { return double(index->ExpiredSessions()); }));
  RETURN_IF_ERROR(registry->AddLabeledGaugeCallback(
      "lookahead_trie_nodes", "Nodes in the namespace's global trie.",
      {"trie_namespace"}, per_namespace(&NamespaceStats::output_nodes)));
  RETURN_IF_ERROR(registry->AddLabeledGaugeCallback(
      "lookahead_trie_capacity_nodes",
      "Node capacity of the namespace's global trie (pruning starts above).",
      {"trie_namespace"}, per_namespace(&NamespaceStats::capacity)));
  RETURN_IF_ERROR(registry->AddLabeledCounterCallback(
      "lookahead_trie_prunes_total", "Prunes of the namespace's global trie.",
      {"trie_namespace"}, per_namespace(&NamespaceStats::prunes)));
  return absl::OkStatus();
}

// The store: size, queue, rebuild, health and the last WAL recovery.
absl::Status RegisterStoreMetrics(metrics::Registry* registry,
                                  TrieStore* store,
                                  const RebuildStats* rebuild) {
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_disk_bytes", "RocksDB's estimate of live data on disk.",
      [store] { return double(store->DiskBytes()); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_pending_batches",
      "Trie write batches queued but not yet written.",
      [store] { return double(store->PendingBatches()); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_rebuild_seconds",
      "Time the last start spent rebuilding the tries from RocksDB.",
      [rebuild] { return rebuild->seconds; }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_degraded",
      "1 while the trie store cannot write (disk full, I/O error, read-only "
      "disk): drafts come from memory, trie updates are not persisted.",
      [store] { return store->degraded() ? 1.0 : 0.0; }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_store_write_errors_total",
      "Failed trie store writes and failed reopen attempts.",
      [store] { return double(store->Health().write_errors); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_unpersisted_mutations",
      "Trie mutations applied in memory while degraded and not yet on disk "
      "(kept or, past the backlog limit, lost at restart).",
      [store] {
        const StoreHealth h = store->Health();
        return double(h.unpersisted_mutations + h.lost_mutations);
      }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_store_recoveries_total",
      "Times the trie store became writable again after being degraded.",
      [store] { return double(store->Health().recoveries); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_wal_dropped_records",
      "Acknowledged write records the last start's WAL recovery dropped.",
      [store] { return double(store->wal_recovery().dropped_records); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_store_wal_dropped_bytes",
      "Acknowledged WAL bytes the last start's WAL recovery dropped.",
      [store] { return double(store->wal_recovery().dropped_bytes); }));
  return absl::OkStatus();
}

// Per source (proposed and accepted, summed over namespaces) and the
// n-gram pools.
absl::Status RegisterSourceMetrics(metrics::Registry* registry,
                                   DraftIndex* index) {
  using metrics::LabeledValue;
  auto per_source = [index](int64_t SourceStatsRow::*field) {
    return [index, field] {
      double totals[kNumCandidateSources] = {};
      for (const NamespaceStats& s : index->Stats("")) {
        for (const SourceStatsRow& row : s.sources) {
          totals[static_cast<int>(row.source)] += double(row.*field);
        }
      }
      std::vector<LabeledValue> values;
      for (int i = 0; i < kNumCandidateSources; ++i) {
        values.push_back(
            {{SourceLabel(static_cast<CandidateSource>(i))}, totals[i]});
      }
      return values;
    };
  };
  RETURN_IF_ERROR(registry->AddLabeledCounterCallback(
      "lookahead_draft_proposed_tokens_total",
      "Draft nodes sent to verifiers, per source (a node several sources "
      "proposed counts for each).",
      {"source"}, per_source(&SourceStatsRow::proposed)));
  RETURN_IF_ERROR(registry->AddLabeledCounterCallback(
      "lookahead_draft_accepted_tokens_total",
      "Of lookahead_draft_proposed_tokens_total, the nodes the verifier "
      "accepted (as draftsvc infers from the next Step's tokens).",
      {"source"}, per_source(&SourceStatsRow::accepted)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_ngram_pool_entries",
      "(key, continuation) entries in the namespaces' n-gram pools, summed.",
      [index] {
        int64_t entries = 0;
        for (const NamespaceStats& s : index->Stats("")) {
          entries += s.ngram_entries;
        }
        return double(entries);
      }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_ngram_pool_prunes_total",
      "Automatic prunes of the namespaces' n-gram pools, summed.", [index] {
        int64_t prunes = 0;
        for (const NamespaceStats& s : index->Stats("")) {
          prunes += s.ngram_prunes;
        }
        return double(prunes);
      }));
  return absl::OkStatus();
}

// The assistant's drafter, and the histogram of its drafts in `out`.
absl::Status RegisterAssistantMetrics(metrics::Registry* registry,
                                      const AssistantSource* assistant,
                                      ServiceMetrics* out) {
  auto stat = [assistant](int64_t AssistantDrafterStats::*field) {
    return [assistant, field] { return double(assistant->stats().*field); };
  };
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_drafted_tokens_total",
      "Tokens the assistant model chose for drafts (before the mixer's "
      "budget; lookahead_draft_proposed_tokens_total{source=\"assistant\"} "
      "counts those sent).",
      stat(&AssistantDrafterStats::drafted_tokens)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_seconds_per_token",
      "The assistant's model time per drafted token, since start.",
      [assistant] { return assistant->stats().seconds_per_drafted_token(); }));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_pass_seconds",
      "What one token the assistant drafts costs at least, as verifiers are "
      "told at each OpenSession: its one-token pass, measured at load and "
      "averaged over its passes since. A verifier whose own token costs "
      "less never asks the assistant.",
      [assistant] { return assistant->seconds_per_token(); }));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_predraft_hits_total",
      "Assistant drafts answered whole from a background pre-draft.",
      stat(&AssistantDrafterStats::predraft_hits)));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_predraft_misses_total",
      "Assistant drafts that needed model work within the Step's deadline.",
      stat(&AssistantDrafterStats::predraft_misses)));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_deadline_cuts_total",
      "Assistant drafts cut short by --assistant_deadline_ms.",
      stat(&AssistantDrafterStats::deadline_cuts)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_cached_tokens",
      "KV-cache token slots the assistant's sessions hold (bounded by "
      "--assistant_max_cached_tokens).",
      stat(&AssistantDrafterStats::cached_tokens)));
  RETURN_IF_ERROR(registry->AddCounterCallback(
      "lookahead_assistant_evictions_total",
      "Sessions whose assistant KV cache was evicted for room (recomputed "
      "from their context when next drafted).",
      stat(&AssistantDrafterStats::evictions)));
  RETURN_IF_ERROR(registry->AddGaugeCallback(
      "lookahead_assistant_sessions",
      "Sessions the assistant drafts for (opened at their first Step entry "
      "that asks for it).",
      stat(&AssistantDrafterStats::sessions)));
  ASSIGN_OR_RETURN(
      out->assistant_draft_seconds,
      registry->AddHistogram(
          "lookahead_assistant_draft_duration_seconds",
          "Time one Step entry waited for the assistant's draft (bounded by "
          "--assistant_deadline_ms plus one model pass at most).",
          metrics::ExponentialBuckets(1e-6, 2, 18)));  // 1 us .. 131 ms
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServiceMetrics> RegisterMetrics(metrics::Registry* registry,
                                               DraftIndex* index,
                                               TrieStore* store,
                                               const AssistantSource* assistant,
                                               const RebuildStats* rebuild) {
  RETURN_IF_ERROR(RegisterIndexMetrics(registry, index));
  RETURN_IF_ERROR(RegisterStoreMetrics(registry, store, rebuild));
  RETURN_IF_ERROR(RegisterSourceMetrics(registry, index));
  ServiceMetrics out;
  ASSIGN_OR_RETURN(out.inserted_tokens,
                   registry->AddCounter(
                       "lookahead_trie_inserted_tokens_total",
                       "Accepted tokens reported by verifiers (inserted into "
                       "the global trie; a retried report's once)."));
  ASSIGN_OR_RETURN(
      out.retrieval_seconds,
      registry->AddHistogram(
          "lookahead_draft_retrieval_duration_seconds",
          "Time to retrieve one session's draft tree in a Step.",
          metrics::ExponentialBuckets(1e-6, 2, 16)));  // 1 us .. 33 ms
  if (assistant == nullptr) return out;
  RETURN_IF_ERROR(RegisterAssistantMetrics(registry, assistant, &out));
  return out;
}

}  // namespace lookahead::draftsvc
