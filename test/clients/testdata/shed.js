// ioredis through a sidecar that sheds <key>:shed, in its default
// configuration: Redis (cluster "0") or Cluster (cluster "1"). For each
// mode named, it increments {<prefix><mode>}:shed and {<prefix><mode>}:other
// in turn, rounds x pairs times, and prints one JSON line: the increments
// acknowledged per key, the refusals, how many pipelines had their first
// command refused, and the distinct error messages the application saw.
// Modes: plain (one command at a time), pipeline, tx (pairs transactions
// of one pair each a round: multi). Arguments:
// host port cluster prefix rounds pairs mode...
"use strict";
const { Redis, Cluster } = require("ioredis");

const [host, port, cluster, prefix] = process.argv.slice(2, 6);
const [rounds, pairs] = process.argv.slice(6, 8).map(Number);
const modes = process.argv.slice(8);

async function main() {
  const r = cluster === "1"
    ? new Cluster([{ host, port: Number(port) }], { lazyConnect: true })
    : new Redis({ host, port: Number(port), lazyConnect: true });
  await r.connect();
  for (const mode of modes) {
    const shed = `{${prefix}${mode}}:shed`, other = `{${prefix}${mode}}:other`;
    const out = { mode, shed: 0, other: 0, refused: 0, firstRefused: 0, errors: [] };
    const error = (e) => {
      out.refused++;
      for (const m of [e.message, ...(e.previousErrors || []).map((p) => p.message)]) {
        if (!out.errors.includes(m)) out.errors.push(m);
      }
    };
    for (let round = 0; round < rounds; round++) {
      if (mode === "plain") {
        for (let i = 0; i < pairs; i++) {
          try {
            await r.incr(shed);
            out.shed++;
          } catch (e) {
            error(e);
          }
          await r.incr(other);
          out.other++;
        }
        continue;
      }
      const batches = [];
      if (mode === "tx") {
        for (let i = 0; i < pairs; i++) batches.push(r.multi().incr(shed).incr(other));
      } else {
        const p = r.pipeline();
        for (let i = 0; i < pairs; i++) p.incr(shed).incr(other);
        batches.push(p);
      }
      for (const p of batches) {
        let res;
        try {
          res = await p.exec();
        } catch (e) {
          error(e); // multi: EXECABORT, with the queued refusal
          out.firstRefused++;
          continue;
        }
        if (res[0][0]) out.firstRefused++;
        res.forEach(([err], i) => {
          if (err) error(err);
          else if (i % 2 === 0) out.shed++;
          else out.other++;
        });
      }
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  }
  await r.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
