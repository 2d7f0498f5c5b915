# redis-py RedisCluster through the sidecar: prints "ready" once it holds
# the slot map; then for each line on stdin: "go" runs the workload (nset
# SETs, nhot GETs of <prefix>hot, nincr INCRs of <prefix>ctr) and prints
# what GET <prefix>ctr answers, "incr" the same without the SETs. Arguments: host port prefix nset nhot
# nincr.
import sys

from redis.cluster import RedisCluster

host, port, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
nset, nhot, nincr = (int(a) for a in sys.argv[4:7])

rc = RedisCluster(host=host, port=port, decode_responses=True)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "go":
        for i in range(nset):
            rc.set(f"{prefix}k:{i}", "v")
    for _ in range(nhot):
        rc.get(f"{prefix}hot")
    for _ in range(nincr):
        rc.incr(f"{prefix}ctr")
    print(rc.get(f"{prefix}ctr"), flush=True)
rc.close()
