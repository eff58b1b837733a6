"""Acceptance by depth from two scrapes of verifysvc's /metrics.

perpos.py FOLDER MODE reads FOLDER/before_MODE.prom and after_MODE.prom
(depth.sh writes them) and prints, for the requests between them, the
draft tokens and drafted steps, then the tokens accepted at each depth:
depth 1 as a share of drafted steps, depth d as a share of depth d - 1's.
"""
import re,sys
def load(f):
    d={}
    for line in open(f):
        m=re.match(r'(\w+)(\{[^}]*\})? ([0-9.e+-]+)',line)
        if m: d[(m.group(1),m.group(2) or '')]=float(m.group(3))
    return d
w,mode=sys.argv[1],sys.argv[2]
a=load(f'{w}/after_{mode}.prom'); b=load(f'{w}/before_{mode}.prom')
pos={}
tot={}
for k in a:
    v=a[k]-b.get(k,0)
    m=re.search(r'position="(\d+)"',k[1])
    if 'per_pos' in k[0] and m: pos[int(m.group(1))]=v
    elif 'per_source' not in k[0]: tot[k[0].replace('lookahead_spec_decode_num_','')]=v
print(w,mode,tot)
prev=tot.get('drafts_total',0)
for d in sorted(pos):
    if pos[d]==0: continue
    print(f'  depth {d}: accepted {pos[d]:.0f} ({pos[d]/prev:.0%} of depth {d-1} hits)' if d>1 else f'  depth 1: accepted {pos[d]:.0f} of {prev:.0f} drafted steps ({pos[d]/prev:.0%})')
    prev=pos[d]
