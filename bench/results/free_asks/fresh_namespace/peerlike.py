"""Chat prompts as the llama.cpp peer command runs ours: per prompt, plain
decoding, then trie-hierarchical drafts in a fresh namespace; prints each
prompt's (decode tokens, decode seconds, EDL) and the decode-phase ratio.

  peerlike.py VERIFYSVC_ADDRESS OUT.json PROMPTS
"""
import sys, os, json, time
sys.path.insert(0, "bench")
import harness, workloads, fetch_workloads
addr, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = harness.Connection(addr); conn.client.wait_ready(timeout=60)
info = conn.client.model_info()
sel = workloads.load(fetch_workloads.default_cache(), ["chat"], info.vocab_size, 4, n)
harness.measure(conn, workloads.Prompt("warm", {"prompt": "Hello"}), "off", "", 128, 300)
rows = []
for i, p in enumerate(sel[0].measured):
    ns = f"pl-{int(time.time())}-{i}"
    r = {}
    for mode in ("off", "hierarchical"):
        u, ids, _ = harness.measure(conn, p, mode, ns if mode != "off" else "", 128, 300)
        r[mode] = (u.output_tokens - 1, u.total_seconds - u.time_to_first_token_seconds, u.output_tokens / u.decoding_steps)
    rows.append(r)
    print(p.id, r, flush=True)
pt = sum(r["off"][0] for r in rows); ps = sum(r["off"][1] for r in rows)
dt = sum(r["hierarchical"][0] for r in rows); ds = sum(r["hierarchical"][1] for r in rows)
print("decode ratio %.3f" % ((dt / ds) / (pt / ps)))
json.dump(rows, open(out, "w"))
