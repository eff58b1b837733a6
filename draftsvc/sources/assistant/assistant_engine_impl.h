// The AssistantEngine over AssistantModel and AssistantDrafter: what the
// assistant plugin (assistant_plugin.cc) exports, and what in-process tests
// pass as DraftServerOptions::assistant.factory.
#ifndef LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_ENGINE_IMPL_H_
#define LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_ENGINE_IMPL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "draftsvc/sources/assistant/assistant_engine.h"

namespace lookahead::draftsvc {

// An AssistantEngineFactory. INVALID_ARGUMENT for bad model options
// (activations, threads, layers) naming the flag; AssistantModel::Load's
// errors; the drafter's, prefixed "assistant drafter: ".
absl::StatusOr<std::unique_ptr<AssistantEngine>> CreateAssistantEngine(
    const std::string& model_path, const AssistantModelOptions& model,
    const AssistantDrafterOptions& drafter);

}  // namespace lookahead::draftsvc

#endif  // LOOKAHEAD_DRAFTSVC_SOURCES_ASSISTANT_ASSISTANT_ENGINE_IMPL_H_
