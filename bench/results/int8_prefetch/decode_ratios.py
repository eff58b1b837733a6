"""Decode-phase and whole-request tok/s of ours drafted against ours plain,
per workload, from a llama.cpp peer run's results.json:

  python3 decode_ratios.py peer_run1/results.json
"""
import json,sys,collections
r=json.load(open(sys.argv[1]))
agg=collections.defaultdict(lambda:[0,0,0,0])
for x in r['llamacpp']['records']:
    if 'decode_seconds' not in x or x.get('decode_seconds') is None: continue
    a=agg[(x['workload'],x['engine'])]; a[0]+=x['decode_tokens']; a[1]+=x['decode_seconds']; a[2]+=x['output_tokens']; a[3]+=x['seconds']
for w in ['code','chat']:
    p=agg[(w,'ours plain')]
    for e in sorted(set(k[1] for k in agg)):
        if e.startswith('ours') and (w,e) in agg:
            a=agg[(w,e)]
            print(w,e,'decode %.1f tok/s (x%.2f)  request %.1f tok/s (x%.2f)'%(a[0]/a[1],(a[0]/a[1])/(p[0]/p[1]),a[2]/a[3],(a[2]/a[3])/(p[2]/p[3])))
