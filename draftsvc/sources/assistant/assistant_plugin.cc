// libdraftsvc_assistant.so's one export: the factory LoadAssistantPlugin
// (assistant_engine.h) looks up by name.
#include "draftsvc/sources/assistant/assistant_engine.h"
#include "draftsvc/sources/assistant/assistant_engine_impl.h"

extern "C" __attribute__((visibility("default")))
lookahead::draftsvc::AssistantEngineFactory
lookahead_draftsvc_assistant_factory() {
  return &lookahead::draftsvc::CreateAssistantEngine;
}
