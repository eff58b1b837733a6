#include "engine/gguf/model_files.h"

#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace lookahead::engine {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

}  // namespace

std::string ModelCacheDir() {
  const char* dir = std::getenv("LOOKAHEAD_MODEL_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  const std::string cache =
      EnvOr("XDG_CACHE_HOME", absl::StrCat(EnvOr("HOME", "/root"), "/.cache"));
  return absl::StrCat(cache, "/lookahead/models");
}

std::string DefaultModelPath() {
  return absl::StrCat(ModelCacheDir(), "/", kDefaultModelFile);
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenModelFile(
    const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "model file ", path,
        " does not exist: run tools/setup.sh (or tools/setup.sh --model) to "
        "fetch the default model, or pass the path of a GGUF file"));
  }
  return GgufFile::Open(path);
}

}  // namespace lookahead::engine
