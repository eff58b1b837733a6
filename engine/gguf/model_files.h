// Where the embedded default model lives, and opening a model file with an
// error that says how to get it. Nothing here downloads: tools/setup.sh
// fetches the model once, before anything runs.
#ifndef LOOKAHEAD_ENGINE_GGUF_MODEL_FILES_H_
#define LOOKAHEAD_ENGINE_GGUF_MODEL_FILES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"

namespace lookahead::engine {

// File name of the embedded default model (SmolLM2-135M-Instruct, Q4_1).
inline constexpr char kDefaultModelFile[] = "SmolLM2-135M-Instruct.Q4_1.gguf";

// The model cache: $LOOKAHEAD_MODEL_DIR, else $XDG_CACHE_HOME/lookahead/models,
// else $HOME/.cache/lookahead/models.
std::string ModelCacheDir();

// ModelCacheDir() + "/" + kDefaultModelFile.
std::string DefaultModelPath();

// Opens the GGUF at `path`. NOT_FOUND, naming the path and `tools/setup.sh`,
// iff the file does not exist; otherwise GgufFile::Open's errors.
absl::StatusOr<std::unique_ptr<GgufFile>> OpenModelFile(
    const std::string& path);

}  // namespace lookahead::engine

#endif  // LOOKAHEAD_ENGINE_GGUF_MODEL_FILES_H_
