// draftsvc_fault_testing: the draftsvc server with one more flag, for the
// storage fault tests (tests/draftsvc_storage_fault_test.cc). TEST ONLY:
// while --testing_store_fault_file exists, every write of the store fails
// as the file's first word says, as on a full or broken disk.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "draftsvc/service/server_main.h"
#include "draftsvc/testing/fault_file_system.h"

ABSL_FLAG(std::string, testing_store_fault_file, "",
          "While this file exists, every write of the store fails as its "
          "first word says ('nospace' (default), 'eio', 'readonly'), as on "
          "a full or broken disk.");

int main(int argc, char** argv) {
  return lookahead::draftsvc::DraftsvcMain(
      argc, argv, [](lookahead::draftsvc::DraftServerOptions* options) {
        const std::string control =
            absl::GetFlag(FLAGS_testing_store_fault_file);
        if (control.empty()) return;
        auto fault_fs =
            std::make_shared<lookahead::draftsvc::FaultFileSystem>();
        fault_fs->SetControlFile(control);
        options->store.file_system = std::move(fault_fs);
        std::fprintf(stderr,
                     "draftsvc: TEST ONLY: store writes fail while %s exists\n",
                     control.c_str());
      });
}
