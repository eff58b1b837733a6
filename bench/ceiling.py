"""How far drafts made of seen text can go: EDL ceilings of the trie and
the n-gram pool on a workload, from plain decoding's own outputs.

Both sources propose text they have seen: the prompt, the output so far,
and (through the namespace) earlier requests' prompts and outputs. The
simulated drafters below know the answer and draft it as far as seen text
allows, at most `max_draft` tokens a step:

  pairs   every drafted token follows its predecessor somewhere in the seen
          text (the first one follows the context's last token). Any chain
          of n-grams (n >= 2) cut from seen text passes this test, so no
          trie, pool or budget over that text accepts more: a target EDL
          above it cannot be met by those sources, whatever their tuning.
  copy    the draft continues one earlier occurrence of the context's last
          token verbatim, the best such occurrence (a trie path's ceiling).
  suffix  a realistic chain: the continuation of the earlier occurrence
          sharing the longest suffix with the context (the most recent on
          a tie), the way prompt-lookup decoding drafts.

(Recycled predictions and Jacobi n-grams also hold tokens the text never
did; the model bounds them, not this.) A step accepts `a` draft tokens and
adds the verifier's own: a + 1 tokens; EDL = output tokens / steps. The
speedup bound charges each step the measured forward cost of exactly a + 1
tokens (a drafter that also knew where to stop), against one token a step
for plain decoding.

    tools/bench.sh --ceiling --no_main --limit=6 --warmup=2
"""

import bisect
import collections

POLICIES = ("pairs", "copy", "suffix")
SCOPES = ("session", "namespace")


class _Text:
    """Token sequences; per token, where it occurs; and every adjacent pair."""

    def __init__(self):
        self.sequences = []
        self.where = collections.defaultdict(list)  # token -> [(seq, pos)]
        self.pairs = set()

    def add(self, tokens):
        self.sequences.append([])
        self.extend(len(self.sequences) - 1, tokens)
        return len(self.sequences) - 1

    def extend(self, index, tokens):
        seq = self.sequences[index]
        for token in tokens:
            if seq:
                self.pairs.add((seq[-1], token))
            self.where[token].append((index, len(seq)))
            seq.append(token)


def _common_prefix(seq, start, target, t, limit):
    n = 0
    while (n < limit and start + n < len(seq) and
           seq[start + n] == target[t + n]):
        n += 1
    return n


def _common_suffix(seq, end, context, limit=64):
    """Tokens seq[..end] and context share at their ends (end inclusive)."""
    n = 0
    while (n < limit and end - n >= 0 and n < len(context) and
           seq[end - n] == context[len(context) - 1 - n]):
        n += 1
    return n


def accepted_lengths(prompt, output, others, max_draft, policy):
    """Draft tokens each step accepts when drafts are copied from `prompt`,
    the output so far and the sequences `others` (earlier requests; empty
    for the session alone), under `policy` (POLICIES). Sums with the steps
    to len(output)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {POLICIES}")
    text = _Text()
    for other in others:
        text.add(other)
    session = text.add(prompt)
    context = text.sequences[session]
    accepted = []
    t = 0
    while t < len(output):
        # At most the tokens left after this step's own one.
        limit = min(max_draft, len(output) - t - 1)
        best = 0
        if policy == "pairs":
            previous = context[-1] if context else None
            while (best < limit and
                   (previous, output[t + best]) in text.pairs):
                previous = output[t + best]
                best += 1
        elif context and limit > 0:
            best_suffix = -1
            for seq_index, pos in text.where.get(context[-1], ()):
                seq = text.sequences[seq_index]
                if pos + 1 >= len(seq):
                    continue  # nothing follows it yet
                if policy == "copy":
                    best = max(best, _common_prefix(seq, pos + 1, output, t,
                                                    limit))
                    if best == limit:
                        break
                    continue
                suffix = _common_suffix(seq, pos, context)
                # Later occurrences come later in `where`: >= keeps the most
                # recent of equal suffixes (the session's own text is last).
                if suffix >= best_suffix:
                    best_suffix = suffix
                    best = _common_prefix(seq, pos + 1, output, t, limit)
        accepted.append(best)
        text.extend(session, output[t:t + best + 1])
        t += best + 1
    return accepted


def cost_curve(verifysvc_log):
    """{tokens: ms} from verifysvc's "forward ms by tokens 1:7.3 2:8.1 ..."
    startup line; empty when it is missing."""
    for line in verifysvc_log or ():
        if line.startswith("verifysvc: forward ms by tokens"):
            pairs = line.split("tokens", 1)[1].split()
            return {int(k): float(v) for k, v in (p.split(":") for p in pairs)}
    return {}


# The mode whose verifier's served cost curve the ceiling study charges
# beside the startup one: the service's default tree.
SERVED_CURVE_MODE = "trie-hierarchical"


def served_cost_curve(metrics_text):
    """{tokens: ms} of a verifier's cost model as it serves (the
    lookahead_step_cost_seconds gauges of its metrics page): the start-up
    curve kept current from the passes it ran. Empty before its first
    step."""
    curve = {}
    for line in metrics_text.splitlines():
        if line.startswith("lookahead_step_cost_seconds{"):
            labels, value = line.rsplit(" ", 1)
            tokens = labels.split('tokens="', 1)[1].split('"', 1)[0]
            curve[int(tokens)] = float(value) * 1e3
    return dict(sorted(curve.items()))


def describe_curve(curve):
    """"1:2.9 2:4.5 ...": ms by tokens, as verifysvc logs its curve."""
    return " ".join(f"{t}:{ms:.1f}" for t, ms in curve.items())


def forward_ms(curve, tokens):
    """The curve's cost of a pass over `tokens`, linear between points."""
    points = sorted(curve)
    i = bisect.bisect_left(points, tokens)
    if i < len(points) and points[i] == tokens:
        return curve[tokens]
    if i == 0:
        return curve[points[0]]
    if i == len(points):
        lo, hi = points[-2], points[-1]
    else:
        lo, hi = points[i - 1], points[i]
    return curve[lo] + (curve[hi] - curve[lo]) * (tokens - lo) / (hi - lo)


def speedup_bound(accepted, curve):
    """Plain's cost (one token a step) over a + 1 tokens' cost per step."""
    if not curve or not accepted:
        return None
    tokens = sum(a + 1 for a in accepted)
    drafted = sum(forward_ms(curve, a + 1) for a in accepted)
    return tokens * forward_ms(curve, 1) / drafted


def run(connection, selected, max_new_tokens, timeout, max_draft, measure):
    """For each workload: plain outputs of the warm-up prompts, then of the
    measured ones; each measured prompt's accepted lengths per policy and
    scope (session: its own prompt and output; namespace: also the warm-up
    and earlier measured prompts and outputs, what the workload's draftsvc
    namespace holds in the source ablation). `measure` is harness.measure."""
    records = []
    for workload in selected:
        seen = []
        for phase, prompts in (("warmup", workload.warmup),
                               ("measured", workload.measured)):
            for prompt in prompts:
                prompt_ids = _prompt_ids(connection, prompt.request)
                _, output, _ = measure(connection, prompt, "off", "",
                                       max_new_tokens, timeout)
                # The ids too (warm-up ones included), for other drafters
                # to be simulated on them offline.
                record = {"workload": workload.name, "prompt": prompt.id,
                          "phase": phase, "prompt_tokens": len(prompt_ids),
                          "output_tokens": len(output),
                          "prompt_ids": prompt_ids, "output_ids": output}
                if phase == "measured":
                    for scope in SCOPES:
                        others = seen if scope == "namespace" else []
                        for policy in POLICIES:
                            record[f"{policy}_{scope}"] = accepted_lengths(
                                prompt_ids, output, others, max_draft, policy)
                records.append(record)
                seen.append(prompt_ids + output)
    return records


def _prompt_ids(connection, request):
    if "tokens" in request:
        return list(request["tokens"])
    if "chat" in request:
        return connection.client.tokenize(chat=request["chat"])
    return connection.client.tokenize(request["prompt"], add_special=True)


def summary_rows(section, curve):
    """Per workload and (policy, scope): EDL and the speedup bound."""
    by_workload = collections.OrderedDict()
    for r in section["records"]:
        if r.get("phase", "measured") == "measured":
            by_workload.setdefault(r["workload"], []).append(r)
    rows = []
    for workload, records in by_workload.items():
        for scope in SCOPES:
            for policy in POLICIES:
                accepted = [a for r in records
                            for a in r[f"{policy}_{scope}"]]
                tokens = sum(a + 1 for a in accepted)
                rows.append({
                    "workload": workload, "policy": policy, "scope": scope,
                    "tokens": tokens, "steps": len(accepted),
                    "edl": tokens / len(accepted) if accepted else 0.0,
                    "speedup_bound": speedup_bound(accepted, curve)})
    return rows


def tree_accepted(tokens, parents, output, t, limit):
    """Draft tokens a greedy verifier accepts from a draft tree (nodes in
    topological order, parents[i] = -1 below the root) when the output
    goes on with output[t:]: the deepest node whose whole path matches."""
    depth = []
    best = 0
    for token, parent in zip(tokens, parents):
        d = 1 if parent < 0 else (depth[parent] + 1 if depth[parent] else 0)
        if d and (d > limit or output[t + d - 1] != token):
            d = 0
        depth.append(d)
        best = max(best, d)
    return best


def trim_by_score(scores, curve):
    """Leading nodes to keep of a best-first scored tree, the way the
    verifier trims one sequence's draft (verifysvc/drafts/draft_trim.h):
    the k maximizing (1 + the first k scores) / forward_ms(1 + k)."""
    best_k, best_rate, gain = 0, 1.0 / forward_ms(curve, 1), 1.0
    for k, score in enumerate(scores, start=1):
        gain += min(max(score, 0.0), 1.0)
        rate = gain / forward_ms(curve, 1 + k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


def trimmed_summary(steps, curve):
    """EDL, nodes kept a step and the modeled speedup of a trimmed replay's
    steps [(accepted, kept)]: each step charged the curve's pass over the
    root and its kept nodes, plain decoding one token a step."""
    tokens = sum(a + 1 for a, _ in steps)
    ms = sum(forward_ms(curve, 1 + kept) for _, kept in steps)
    return (tokens / len(steps), sum(k for _, k in steps) / len(steps),
            tokens * forward_ms(curve, 1) / ms)


def replay(address, records, budgets, vocab_size, branch_length=16,
           sources=("prompt", "output"), curve=None):
    """draftsvc's own trees on the ceiling run's outputs (records with their
    ids): per workload and budget, a fresh namespace gets the warm-up
    prompts and outputs through sessions, then each measured prompt is
    stepped through its output, asking for a tree of `budget` nodes from
    `sources` at every step and accepting what its best branch matches (as
    a greedy verifier would); sessions use `branch_length` (verifysvc's
    default). With a cost `curve`, each tree is first cut to what its
    scores say pays (trim_by_score), and the result holds per step
    (accepted, kept nodes) instead: how well the scores pick the steps and
    the depth to draft. Returns {workload: {budget: accepted lists}}:
    the tree quality of the trie itself, without the verifier's pacing,
    trimming or deadlines."""
    import grpc
    from lookahead_client.proto import draft_pb2, draft_pb2_grpc
    source_ids = [getattr(draft_pb2, f"DRAFT_SOURCE_{s.upper()}")
                  for s in sources]
    stub = draft_pb2_grpc.DraftServiceStub(grpc.insecure_channel(address))
    results = collections.OrderedDict()
    serial = [0]

    def open_session(name_space, prompt):
        serial[0] += 1
        session = f"replay/{serial[0]}"
        stub.OpenSession(draft_pb2.OpenSessionRequest(
            session_id=session, namespace=name_space, vocab_size=vocab_size,
            prompt_tokens=prompt, branch_length=branch_length,
            sources=source_ids))
        return session

    def step(session, accepted, budget):
        response = stub.Step(draft_pb2.StepRequest(steps=[
            draft_pb2.SessionStep(
                session_id=session, accepted_tokens=accepted,
                decoding_length=budget, sources=source_ids,
                mode=draft_pb2.DRAFT_MODE_TRIE_HIERARCHICAL)]))
        entry = response.drafts[0]
        if entry.code:
            raise RuntimeError(f"draftsvc Step: {entry.code} {entry.message}")
        return entry.tree

    for r in records:
        results.setdefault(r["workload"], collections.OrderedDict())
    for workload in results:
        ours = [r for r in records if r["workload"] == workload]
        for budget in budgets:
            name_space = f"replay-{workload}-{budget}"
            lengths = []
            for r in ours:
                prompt, output = r["prompt_ids"], r["output_ids"]
                session = open_session(name_space, prompt)
                if r["phase"] != "measured":
                    step(session, output, 0)
                    stub.CloseSession(
                        draft_pb2.CloseSessionRequest(session_id=session))
                    continue
                t, pending, accepted = 0, [], []
                while t < len(output):
                    tree = step(session, pending, budget)
                    kept = len(tree.tokens)
                    if curve:
                        kept = trim_by_score(tree.scores, curve)
                    a = tree_accepted(tree.tokens[:kept], tree.parents[:kept],
                                      output, t, len(output) - t - 1)
                    accepted.append((a, kept) if curve else a)
                    pending = output[t:t + a + 1]
                    t += a + 1
                step(session, pending, 0)
                stub.CloseSession(
                    draft_pb2.CloseSessionRequest(session_id=session))
                lengths.append(accepted)
            results[workload][budget] = lengths
    return results


def main(argv):
    """Replays a draftsvc binary's trees, cut by score on a fixed cost
    curve, on the outputs a --ceiling run saved: a deterministic A/B of two
    draftsvc builds, free of the machine's timing noise.

        bench/ceiling.py bench/results/ceiling/results.json \\
            --draftsvc=.bazel/bin/draftsvc/draftsvc --curve=1:7.3,4:9.6,8:13.4
    """
    import argparse
    import contextlib
    import json
    import os
    import tempfile

    import harness
    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    parser.add_argument("results")
    parser.add_argument("--draftsvc", required=True)
    parser.add_argument("--curve", required=True,
                        help="tokens:ms pairs, e.g. 1:7.3,4:9.6,8:13.4,16:20.2")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--workloads", default="rag,chat,code")
    args = parser.parse_args(argv)
    curve = {int(k): float(v) for k, v in
             (pair.split(":") for pair in args.curve.split(","))}
    with open(args.results) as f:
        results = json.load(f)
    names = args.workloads.split(",")
    records = [r for r in results["ceiling"]["records"]
               if r["workload"] in names]
    vocab_size = 1 + max(t for r in records
                         for t in r["prompt_ids"] + r["output_ids"])
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory())
        service = harness.Service(
            "draftsvc", [args.draftsvc, f"--db_path={work}/db"], work)
        stack.callback(service.stop)
        replayed = replay(service.wait_address(), records, [args.budget],
                          max(vocab_size, 49152), curve=curve)
    for workload, by_budget in replayed.items():
        steps = [s for per_prompt in by_budget[args.budget] for s in per_prompt]
        edl, kept, speedup = trimmed_summary(steps, curve)
        print(f"{workload}: EDL {edl:.2f}, {kept:.2f} nodes kept a step, "
              f"modeled speedup {speedup:.3f}x")
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
