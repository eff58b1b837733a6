// Two verifysvc replicas on one draftsvc share what they learn, by
// namespace: the outputs replica A accepts (the output trie) and the
// predictions its verify passes recycle (the n-gram pool) draft replica B's
// requests in the same namespace, and no other namespace's.
//
// For each shared source alone (the tries; the n-gram pool) A answers a set
// of chat prompts in namespace "<source>-shared"; then B answers the same
// prompts in "<source>-shared" and in the untouched "<source>-other". Every
// output equals plain decoding; B accepts more draft tokens from that source
// in the shared namespace than in the other one; and A's requests never
// created the other namespace at draftsvc.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service_pair.h"

namespace lookahead::testing {
namespace {

namespace v1 = ::lookahead::v1;

constexpr int kNewTokens = 48;
const char* const kPrompts[] = {
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
    "Give three tips for learning to cook.",
};

v1::GenerateRequest Request(const char* prompt, const std::string& ns,
                            v1::DraftSource source) {
  v1::GenerateRequest request = ChatRequest(prompt, kNewTokens);
  request.mutable_draft()->set_namespace_(ns);
  request.mutable_draft()->add_sources(source);
  return request;
}

// Draft tokens of `source` that `usage` says were accepted. The tries
// (prompt and output) are one source, reported as DRAFT_SOURCE_PROMPT.
int64_t AcceptedFrom(const v1::Usage& usage, v1::DraftSource source) {
  auto tries = [](v1::DraftSource s) {
    return s == v1::DRAFT_SOURCE_PROMPT || s == v1::DRAFT_SOURCE_OUTPUT;
  };
  int64_t accepted = 0;
  for (const v1::SourceUsage& s : usage.sources()) {
    if (s.source() == source || (tries(s.source()) && tries(source))) {
      accepted += s.accepted_draft_tokens();
    }
  }
  return accepted;
}

class ServiceReplicasTest : public ::testing::TestWithParam<v1::DraftSource> {};

TEST_P(ServiceReplicasTest, ReplicaBDraftsFromReplicaAInItsNamespaceOnly) {
  const v1::DraftSource source = GetParam();
  const std::string name = v1::DraftSource_Name(source);
  PairOptions options;
  options.name = absl::StrCat("replicas-", name);
  // What B accepts must measure what A taught draftsvc, not the model's
  // predictions B recycled in process from its own earlier requests.
  options.verifysvc_flags = WaitForDraftsFlags();
  options.verifysvc_flags.push_back("--recycled_drafts=false");
  absl::StatusOr<std::unique_ptr<ServicePair>> pair =
      ServicePair::Start(options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  PrintLogsOnFailure logs(**pair);
  absl::StatusOr<int> b = (*pair)->StartReplica();
  ASSERT_TRUE(b.ok()) << b.status();

  const std::string shared = absl::StrCat(name, "-shared");
  const std::string other = absl::StrCat(name, "-other");
  for (const char* prompt : kPrompts) {
    const Generation a =
        (*pair)->GenerateOn(0, Request(prompt, shared, source));
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  }
  ASSERT_TRUE((*pair)->FlushDrafts().ok());
  // draftsvc does not know the other namespace: A never touched it.
  absl::StatusOr<v1::StatsResponse> before = (*pair)->DraftStats(other);
  EXPECT_TRUE(absl::IsNotFound(before.status()) ||
              (before.ok() && before->namespaces_size() == 0))
      << "replica A's requests in " << shared << " reached " << other << ": "
      << before.status();

  int64_t accepted_shared = 0;
  int64_t accepted_other = 0;
  for (const char* prompt : kPrompts) {
    const Generation plain =
        (*pair)->Reference(Request(prompt, shared, source));
    const Generation in_shared =
        (*pair)->GenerateOn(*b, Request(prompt, shared, source));
    const Generation in_other =
        (*pair)->GenerateOn(*b, Request(prompt, other, source));
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    ASSERT_TRUE(in_shared.status.ok()) << in_shared.status.error_message();
    ASSERT_TRUE(in_other.status.ok()) << in_other.status.error_message();
    EXPECT_EQ(in_shared.tokens, plain.tokens) << prompt;
    EXPECT_EQ(in_other.tokens, plain.tokens) << prompt;
    accepted_shared += AcceptedFrom(in_shared.usage, source);
    accepted_other += AcceptedFrom(in_other.usage, source);
    std::printf(
        "%s %-48s B shared: EDL %.2f (%lld accepted), B other: EDL "
        "%.2f (%lld accepted)\n",
        name.c_str(), prompt, in_shared.usage.edl(),
        static_cast<long long>(AcceptedFrom(in_shared.usage, source)),
        in_other.usage.edl(),
        static_cast<long long>(AcceptedFrom(in_other.usage, source)));
  }
  EXPECT_GT(accepted_shared, accepted_other)
      << "replica B did not profit from replica A's " << name
      << " in the shared namespace";
  // A's work is visible at draftsvc in the shared namespace only.
  absl::StatusOr<v1::StatsResponse> stats = (*pair)->DraftStats(shared);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->namespaces_size(), 1);
  if (source == v1::DRAFT_SOURCE_NGRAM) {
    EXPECT_GT(stats->namespaces(0).ngram_entries(), 0);
  } else {
    EXPECT_GT(stats->namespaces(0).output_nodes(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sources, ServiceReplicasTest,
    ::testing::Values(v1::DRAFT_SOURCE_OUTPUT, v1::DRAFT_SOURCE_NGRAM),
    [](const ::testing::TestParamInfo<v1::DraftSource>& info) {
      return v1::DraftSource_Name(info.param);
    });

}  // namespace
}  // namespace lookahead::testing
