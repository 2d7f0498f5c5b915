# redis-py Redis, in its default configuration, through a sidecar that
# refuses APPEND on <key> inside MULTI: runs MULTI, INCR <other>, APPEND
# <key> x, INCR <other>, EXEC (a pipeline with transaction=True), then a
# plain INCR <other>, and prints one JSON line: the error the transaction
# raised, its type, and the plain INCR's reply. Arguments: host port key
# other.
import json
import sys

from redis import Redis
from redis.exceptions import ResponseError

host, port, key, other = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = Redis(host=host, port=port)
out = {"error": "", "type": ""}
p = r.pipeline(transaction=True)
p.incr(other)
p.append(key, "x")
p.incr(other)
try:
    p.execute()
except ResponseError as e:
    out["error"], out["type"] = str(e), type(e).__name__
out["after"] = r.incr(other)
print(json.dumps(out), flush=True)
r.close()
