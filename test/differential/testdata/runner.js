// ioredis runner of the differential harness (npm ioredis, pinned by
// hack/setup-clients.sh into bin/node_modules), in the client's default
// configuration but for what the application itself sets (address,
// password, cluster or not). The protocol is runner.py's.
"use strict";
const readline = require("readline");
const Redis = require("ioredis");

const [host, port, cluster, password] = process.argv.slice(2);
const opts = password ? { password } : {};
const c = cluster === "1"
  ? new Redis.Cluster([{ host, port: Number(port) }], { redisOptions: opts })
  : new Redis({ host, port: Number(port), ...opts });

function norm(v) {
  if (v instanceof Error) return "e:" + v.name + ":" + v.message;
  if (v === null || v === undefined) return "nil";
  if (typeof v === "number") return "i:" + v;
  if (typeof v === "string") return "s:" + v;
  if (Buffer.isBuffer(v)) return "s:" + v.toString();
  if (Array.isArray(v)) return "a:[" + v.map(norm).join(",") + "]";
  return "s:" + JSON.stringify(v);
}

async function batch(b) {
  if (b.mode === "plain") {
    const r = [];
    for (const op of b.ops) {
      try { r.push(norm(await c.call(op[0], ...op.slice(1)))); } catch (e) { r.push(norm(e)); }
    }
    return { r };
  }
  const p = b.mode === "tx" ? c.multi() : c.pipeline();
  for (const op of b.ops) p.call(op[0], ...op.slice(1));
  let res;
  try {
    res = await p.exec();
  } catch (e) {
    if (b.mode === "tx") return { x: norm(e) };
    throw e;
  }
  if (res === null) return { x: "nil" };
  return { r: res.map(([err, v]) => norm(err || v)) };
}

async function main() {
  const ready = cluster === "1" ? new Promise((ok) => c.once("ready", ok)) : c.ping();
  await ready;
  process.stdout.write("ready\n");
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    process.stdout.write(JSON.stringify(await batch(JSON.parse(line))) + "\n");
  }
  c.disconnect();
}
main().catch((e) => { console.error(e); process.exit(1); });
