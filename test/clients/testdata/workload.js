// ioredis Cluster through the sidecar: prints "ready" once it holds the
// slot map; then for each line on stdin: "go" runs the workload (nset
// SETs, nhot GETs of <prefix>hot, nincr INCRs of <prefix>ctr) and prints
// what GET <prefix>ctr answers, "incr" the same without the SETs. Arguments: host port prefix nset nhot nincr.
"use strict";
const { Cluster } = require("ioredis");
const readline = require("readline");

const [host, port, prefix] = process.argv.slice(2, 5);
const [nset, nhot, nincr] = process.argv.slice(5, 8).map(Number);

async function main() {
  const c = new Cluster([{ host, port: Number(port) }], { lazyConnect: true });
  await c.connect();
  process.stdout.write("ready\n");
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line.trim() === "go") {
      for (let i = 0; i < nset; i++) await c.set(`${prefix}k:${i}`, "v");
    }
    for (let i = 0; i < nhot; i++) await c.get(`${prefix}hot`);
    for (let i = 0; i < nincr; i++) await c.incr(`${prefix}ctr`);
    process.stdout.write(`${await c.get(`${prefix}ctr`)}\n`);
  }
  await c.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
