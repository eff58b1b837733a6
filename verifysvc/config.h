// VerifysvcConfig: every setting of the verifysvc binary, read from its
// flags in one place (config.cc defines the flags; `verifysvc --help`).
#ifndef LOOKAHEAD_VERIFYSVC_CONFIG_H_
#define LOOKAHEAD_VERIFYSVC_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/gguf/model_config.h"
#include "engine/model/draft_tree.h"
#include "engine/model/llama_model.h"
#include "engine/model/prefix_cache.h"
#include "engine/model/threading.h"
#include "engine/text/tokenizer.h"
#include "verifysvc/draftsvc_client/draftsvc_client.h"
#include "verifysvc/draftsvc_client/draftsvc_sessions.h"
#include "verifysvc/serving/request_builder.h"
#include "verifysvc/serving/scheduler.h"

namespace lookahead::verifysvc {

struct VerifysvcConfig {
  std::string host;
  int port = 0;
  std::string port_file;   // written once serving; empty = none
  std::string model_path;  // the GGUF file (default: the model cache's)
  std::string draftsvc;    // address; empty = no drafts
  DraftClientOptions draft_client;
  DraftSessionsOptions draft_sessions;
  engine::ThreadOptions threads;
  engine::ModelOptions model;
  // Chat content as text or, with --parse_special_in_content, HF's way.
  engine::TokenizerOptions tokenizer;
  RequestLimits limits;  // completed by FitLimitsToModel
  SchedulerOptions scheduler;
  // capacity_bytes 0: no prefix cache.
  engine::PrefixCacheOptions prefix_cache;
  int metrics_port = 0;  // -1: no /metrics
  std::string metrics_port_file;
  absl::Duration shutdown_grace;
};

// Reads the flags (after absl::ParseCommandLine). INVALID_ARGUMENT naming
// the flag for values out of range or an unknown --device/--dtype.
absl::StatusOr<VerifysvcConfig> ConfigFromFlags();

// A --draft_sources list ("trie,ngram"; prompt and output alias trie; empty:
// 0 = draftsvc's defaults) as a source set. INVALID_ARGUMENT naming an
// unknown name.
absl::StatusOr<engine::DraftSourceSet> ParseDraftSources(
    absl::string_view list);

// Returns the prefix cache of config->prefix_cache for `model`'s K/V and
// points config->scheduler.prefix_cache at it, or null iff its capacity is 0.
// The caller owns it; it must outlive the scheduler. INVALID_ARGUMENT as
// PrefixCache::Create.
absl::StatusOr<std::unique_ptr<engine::PrefixCache>> AttachPrefixCache(
    const engine::LlamaModel& model, VerifysvcConfig* config);

// Caps the context at the model's, defaults the prompt limit to the context
// less one, and sets the vocabulary size.
void FitLimitsToModel(const engine::ModelConfig& model, RequestLimits* limits);

}  // namespace lookahead::verifysvc

#endif  // LOOKAHEAD_VERIFYSVC_CONFIG_H_
