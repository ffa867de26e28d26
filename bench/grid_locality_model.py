"""Model of the locality experiment (docs/performance.md, rows in Morton order): how many distinct x-pair requests
the main grid's levels 2..15 need per block of rows when the rows are uniformly random and when the same
rows are in Morton order. A request repeated inside a block is counted once (assumed served by L1).
The x-pair of a corner is approximated by (cell x / 2, cell y, cell z); the hash is not modelled.
Run with /usr/bin/python3 (numpy from Debian); takes about a minute."""
import numpy as np
rng=np.random.default_rng(1)
N=1<<20
x=rng.random((N,3),dtype=np.float32)
def spread(v):
    v=v.astype(np.uint64)&0x3ff
    v=(v|(v<<16))&0x030000ff; v=(v|(v<<8))&0x0300f00f; v=(v|(v<<4))&0x030c30c3; v=(v|(v<<2))&0x09249249
    return v
q=np.minimum((x*1024).astype(np.uint64),1023)
code=spread(q[:,0])|(spread(q[:,1])<<1)|(spread(q[:,2])<<2)
xs=x[np.argsort(code,kind='stable')]
for B in (256, 2048):
  tot_r=tot_s=0
  for l in range(16):
    res=16*1.5**l
    for name,pts in (('r',x),('s',xs)):
        c=np.floor(pts*res).astype(np.int64)
        blk=np.arange(N)//B
        keys=[]
        for dy in (0,1):
            for dz in (0,1):
                k=((blk*4096+ (c[:,0]>>1))*4096 + c[:,1]+dy)*4096 + c[:,2]+dz  # x-pair approx: cell x halved
                keys.append(k)
        u=len(np.unique(np.concatenate(keys)))
        if l>=2:
            if name=='r': tot_r+=u
            else: tot_s+=u
        if B==256: print(l, name, round(res,1), u/(4*N))
  print('B',B,'requests sorted/random', tot_s/tot_r, 'random per row', tot_r/N)
