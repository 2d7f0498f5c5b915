# redis-py through a sidecar that sheds <key>:shed, in its default
# configuration: Redis (cluster "0") or RedisCluster (cluster "1"). For each
# mode named, it increments {<prefix><mode>}:shed and {<prefix><mode>}:other
# in turn, rounds x pairs times, and prints one JSON line: the increments
# acknowledged per key, the refusals, how many pipelines had their first
# command refused, and the distinct error messages the application saw.
# Modes: plain (one command at a time), pipeline (transaction=False), tx
# (pairs transactions of one pair each a round: pipeline with
# transaction=True, MULTI/EXEC; not on RedisCluster, which has no
# transactions). Arguments: host port cluster prefix rounds
# pairs mode...
import json
import sys

from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

host, port, cluster, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
rounds, pairs = int(sys.argv[5]), int(sys.argv[6])
modes = sys.argv[7:]

r = RedisCluster(host=host, port=port) if cluster else Redis(host=host, port=port)

for mode in modes:
    shed, other = f"{{{prefix}{mode}}}:shed", f"{{{prefix}{mode}}}:other"
    out = {"mode": mode, "shed": 0, "other": 0, "refused": 0, "firstRefused": 0, "errors": []}

    def error(e):
        out["refused"] += 1
        if str(e) not in out["errors"]:
            out["errors"].append(str(e))

    for _ in range(rounds):
        if mode == "plain":
            for _ in range(pairs):
                try:
                    r.incr(shed)
                    out["shed"] += 1
                except ResponseError as e:
                    error(e)
                r.incr(other)
                out["other"] += 1
            continue
        if mode == "tx":
            for _ in range(pairs):
                p = r.pipeline(transaction=True)
                p.incr(shed)
                p.incr(other)
                try:
                    p.execute()
                except ResponseError as e:
                    error(e)
                    out["firstRefused"] += 1
                    continue
                out["shed"] += 1
                out["other"] += 1
            continue
        p = r.pipeline(transaction=False)
        for _ in range(pairs):
            p.incr(shed)
            p.incr(other)
        res = p.execute(raise_on_error=False)
        if isinstance(res[0], Exception):
            out["firstRefused"] += 1
        for i, v in enumerate(res):
            if isinstance(v, Exception):
                error(v)
            elif i % 2 == 0:
                out["shed"] += 1
            else:
                out["other"] += 1
    print(json.dumps(out), flush=True)
r.close()
