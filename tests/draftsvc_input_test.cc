// Invalid UTF-8 straight on the wire to the real draftsvc binary, in every
// string field it reads: each request gets INVALID_ARGUMENT whose message
// starts with the field's path, never gRPC's bare UNIMPLEMENTED; the server
// log gets no libprotobuf ERROR line per request and at most one line a
// minute about them; the same requests with valid bytes are served.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/draft.pb.h"
#include "tests/draftsvc_storage_harness.h"
#include "tests/raw_grpc_call.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

// A lone continuation byte, 0xFF, an overlong '/', a UTF-16 surrogate and a
// cut 3-byte character; the placeholder is as long.
const char kBadUtf8[] = "\x80\xFF\xC0\xAF\xED\xA0\x80\xE2\x82";
const char kPlaceholder[] = "@@BADUTF@";

struct BadWire {
  std::string what;
  std::string method;
  std::string body;
  std::string field;  // the path the message must start with
};

std::string Method(const char* name) {
  return absl::StrCat("/lookahead.v1.DraftService/", name);
}

std::vector<BadWire> InvalidUtf8Requests() {
  const std::string bad(kBadUtf8, sizeof(kBadUtf8) - 1);
  const std::string p = kPlaceholder;
  std::vector<BadWire> cases;
  {
    v1::OpenSessionRequest r;
    r.set_session_id(p);
    r.set_vocab_size(100);
    cases.push_back({"OpenSession session_id", Method("OpenSession"),
                     WireWith(r, p, bad), "session_id"});
  }
  {
    v1::OpenSessionRequest r;
    r.set_session_id("s");
    r.set_namespace_(p);
    r.set_vocab_size(100);
    cases.push_back({"OpenSession namespace", Method("OpenSession"),
                     WireWith(r, p, bad), "namespace"});
  }
  {
    v1::StepRequest r;
    r.add_steps()->set_session_id("ok");
    r.add_steps()->set_session_id(p);
    cases.push_back({"second Step entry", Method("Step"), WireWith(r, p, bad),
                     "steps[1].session_id"});
  }
  {
    v1::CloseSessionRequest r;
    r.set_session_id(p);
    cases.push_back({"CloseSession session_id", Method("CloseSession"),
                     WireWith(r, p, bad), "session_id"});
  }
  {
    v1::StatsRequest r;
    r.set_namespace_(p);
    cases.push_back(
        {"Stats namespace", Method("Stats"), WireWith(r, p, bad), "namespace"});
  }
  {
    v1::PruneRequest r;
    r.set_namespace_(p);
    cases.push_back(
        {"Prune namespace", Method("Prune"), WireWith(r, p, bad), "namespace"});
  }
  return cases;
}

TEST(DraftsvcInputTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  ASSERT_EQ(sizeof(kBadUtf8), sizeof(kPlaceholder));
  const std::string work = FreshDir("input");
  Draftsvc d = StartDraftsvc(work + "/db", work, "input", {});
  ASSERT_GT(d.port, 0) << d.process->Log();
  const std::vector<BadWire> cases = InvalidUtf8Requests();
  constexpr int kRounds = 5;  // The log must not grow a line per request.
  for (int round = 0; round < kRounds; ++round) {
    for (const BadWire& bad : cases) {
      SCOPED_TRACE(bad.what);
      const RawReply got = RawCall(d.port, bad.method, bad.body);
      EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << got.status.error_message();
      EXPECT_EQ(got.messages, 0);
      EXPECT_TRUE(
          absl::StartsWith(got.status.error_message(), bad.field + " is "))
          << got.status.error_message() << " does not start with " << bad.field;
      EXPECT_TRUE(
          absl::StrContains(got.status.error_message(), "not valid UTF-8"))
          << got.status.error_message();
    }
  }
  // Valid bytes through the same raw path: served, responses intact.
  ASSERT_TRUE(OpenSession(*d.stub, "valid").ok());
  v1::SessionDraft draft;
  ASSERT_TRUE(Step(*d.stub, "valid", {1, 2, 3, 1, 2, 3}, &draft).ok());
  EXPECT_EQ(draft.code(), 0) << draft.message();
  EXPECT_EQ(draft.session_id(), "valid");
  v1::StatsResponse stats;
  ASSERT_TRUE(Stats(*d.stub, &stats).ok());
  EXPECT_EQ(stats.namespaces_size(), 1);

  const std::string log = d.process->Log();
  int lines_about_it = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "UTF-8")) ++lines_about_it;
  }
  EXPECT_FALSE(absl::StrContains(log, "libprotobuf ERROR")) << log;
  EXPECT_EQ(lines_about_it, 1) << log;
  EXPECT_EQ(d.process->Kill(SIGTERM), 0) << log;
}

}  // namespace
}  // namespace lookahead::testing
