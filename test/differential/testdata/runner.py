# redis-py runner of the differential harness (Debian's python3-redis, run
# by the system python3), in the client's default configuration but for
# what the application itself sets (address, password, cluster or not).
#
# Arguments: host port cluster(0|1) password. Prints "ready", then for each
# batch on stdin (a JSON object {"mode": "plain"|"pipeline"|"tx", "ops":
# [[cmd, arg...], ...]}) prints one JSON line: {"r": [reply...]} with one
# normalised reply per op, or {"x": error} when a transaction failed as a
# whole (EXECABORT). A reply is normalised to a string: "i:<n>", "s:<text>",
# "nil", "a:[...]" (elements joined by ","), "m:{k=v,...}" (sorted), or
# "e:<class>:<message>".
import json
import sys

import redis
from redis.cluster import RedisCluster

host, port, cluster, password = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] or None


def norm(v):
    if isinstance(v, Exception):
        return "e:%s:%s" % (type(v).__name__, v)
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "i:%d" % int(v)
    if isinstance(v, int):
        return "i:%d" % v
    if isinstance(v, (bytes, str)):
        return "s:" + (v.decode() if isinstance(v, bytes) else v)
    if isinstance(v, dict):
        return "m:{" + ",".join(sorted("%s=%s" % (norm(k), norm(x)) for k, x in v.items())) + "}"
    if isinstance(v, (set, frozenset)):
        # SMEMBERS: a Python set, whose order is the process's own.
        return "a:[" + ",".join(sorted(norm(x) for x in v)) + "]"
    if isinstance(v, (list, tuple)):
        return "a:[" + ",".join(norm(x) for x in v) + "]"
    return "s:%r" % (v,)


def call(c, op):
    try:
        return norm(c.execute_command(*op))
    except redis.exceptions.RedisError as e:
        return norm(e)


if cluster:
    c = RedisCluster(host=host, port=port, password=password, decode_responses=True)
else:
    c = redis.Redis(host=host, port=port, password=password, decode_responses=True)
print("ready", flush=True)
for line in sys.stdin:
    b = json.loads(line)
    mode, ops = b["mode"], b["ops"]
    if mode == "plain":
        print(json.dumps({"r": [call(c, op) for op in ops]}), flush=True)
        continue
    p = c.pipeline(transaction=(mode == "tx"))
    for op in ops:
        p.execute_command(*op)
    try:
        res = p.execute(raise_on_error=False)
    except redis.exceptions.RedisError as e:
        if mode == "tx":
            # With raise_on_error=False, redis-py raises from a transaction
            # only when EXEC failed: on EXECABORT it raises the first
            # queue-time error, annotated "Command # n (...) of pipeline
            # caused error" (Pipeline._execute_transaction).
            x = norm(e)
            if isinstance(e, redis.exceptions.ExecAbortError) or "of pipeline caused error" in str(e):
                x = "EXECABORT " + x
            print(json.dumps({"x": x}), flush=True)
        else:
            # A pipeline the client gave up on: every command of it gets
            # the error.
            print(json.dumps({"r": [norm(e)] * len(ops)}), flush=True)
        continue
    print(json.dumps({"r": [norm(v) for v in res]}), flush=True)
c.close()
