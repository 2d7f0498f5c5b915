// ioredis, in its default configuration (Redis for cluster "0", Cluster
// for "1"), through a sidecar that refuses APPEND on <key> inside MULTI:
// runs MULTI, INCR <other>, APPEND <key> x, INCR <other>, EXEC, then a plain
// INCR <other>, and prints one JSON line: the error the transaction
// rejected with, the errors of its queued commands, and the plain INCR's
// reply. Arguments: host port cluster key other.
"use strict";
const { Redis, Cluster } = require("ioredis");

const [host, port, cluster, key, other] = process.argv.slice(2, 7);

async function main() {
  const r = cluster === "1"
    ? new Cluster([{ host, port: Number(port) }], { lazyConnect: true })
    : new Redis({ host, port: Number(port), lazyConnect: true });
  await r.connect();
  const out = { error: "", previous: [] };
  try {
    const res = await r.multi().incr(other).append(key, "x").incr(other).exec();
    out.result = res;
  } catch (e) {
    out.error = e.message;
    out.previous = (e.previousErrors || []).map((p) => p.message);
  }
  out.after = await r.incr(other);
  process.stdout.write(JSON.stringify(out) + "\n");
  await r.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
