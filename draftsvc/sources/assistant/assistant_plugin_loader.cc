// LoadAssistantPlugin (assistant_engine.h): dlopen of the assistant plugin.
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "draftsvc/sources/assistant/assistant_engine.h"

namespace lookahead::draftsvc {
namespace {

constexpr char kPluginFile[] = "libdraftsvc_assistant.so";

// Where Bazel builds kPluginFile relative to //draftsvc:draftsvc
// (//draftsvc/sources/assistant:libdraftsvc_assistant.so).
constexpr char kBazelPluginDir[] = "sources/assistant";

// kPluginFile in kBazelPluginDir below the directory of the running binary
// (symlinks resolved, so a Bazel runfiles link finds the real output tree),
// as Bazel builds them; if it is not there, beside the binary, as an
// installation lays them out (the load error names that path if neither
// exists). The build's own folder comes first so that a stale copy beside
// the binary (an older build's output) never shadows the current plugin.
std::string DefaultPluginPath() {
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return kPluginFile;
  const std::filesystem::path built =
      exe.parent_path() / kBazelPluginDir / kPluginFile;
  if (std::filesystem::exists(built, ec)) return built.string();
  return (exe.parent_path() / kPluginFile).string();
}

}  // namespace

absl::StatusOr<AssistantEngineFactory> LoadAssistantPlugin(
    const std::string& plugin_path) {
  const std::string path =
      plugin_path.empty() ? DefaultPluginPath() : plugin_path;
  // RTLD_LOCAL: the plugin's copies of the engine stay its own.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load the assistant plugin ", path, ": ",
        why != nullptr ? why : "unknown error",
        " (it runs --assistant_model and --self_draft; `bazel build "
        "//draftsvc:draftsvc` builds it into sources/assistant/ below the "
        "binary's folder; it needs LibTorch's shared libraries; "
        "--assistant_plugin names another path)"));
  }
  auto getter = reinterpret_cast<AssistantFactoryGetter>(
      ::dlsym(handle, kAssistantFactorySymbol));
  if (getter == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("assistant plugin ", path, " exports no ",
                     kAssistantFactorySymbol, " (not a draftsvc plugin?)"));
  }
  return getter();
}

}  // namespace lookahead::draftsvc
