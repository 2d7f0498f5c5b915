// Application code on Node through heatsink's sidecars: a BullMQ job queue,
// an ioredis leaderboard, hash of counters, feature-flag set and product
// hash, rate-limiter-flexible's RateLimiterRedis (its INCR + TTL Lua
// script by EVALSHA) and a hand-written fixed window (INCR + EXPIRE in
// MULTI). Every library in its default configuration; ioredis' Redis, or
// Cluster when the Redis behind is a cluster (the sidecar presents itself
// as a one-node cluster). Arguments: cluster host:port... (the sidecars,
// one client each).
//
// Line protocol on stdio: prints "ready" once set up; "go" starts the
// rounds (one every 100 ms per client); "snap" prints the commands sent
// per workload tag so far as JSON; "stop" ends the rounds, drains the
// queue, checks every workload's exactness and prints one JSON line
// {calls, refused, errors, lastError, exact: {tag: [ok, detail]}}.
"use strict";
const { Redis, Cluster } = require("ioredis");
const { Queue, Worker } = require("bullmq");
const { RateLimiterRedis } = require("rate-limiter-flexible");
const readline = require("readline");

const cluster = process.argv[2] === "1";
const addrs = process.argv.slice(3).map((a) => {
  const [host, port] = a.split(":");
  return { host, port: Number(port) };
});
const names = ["queue", "leaderboard", "stats", "flags", "product", "lua", "window"];

// Every command any ioredis connection sends (the libraries' own
// included), counted by the workload tag of the first key naming one, and
// its reply's error: a heatsink refusal or SHED apart from the rest.
const calls = {}, refused = {}, errors = {}, lastError = {};
function tagOf(args) {
  for (const a of args) {
    const s = typeof a === "string" ? a : Buffer.isBuffer(a) ? a.toString() : "";
    const j = s.indexOf("js:");
    if (j < 0) continue;
    for (const w of names) if (s.startsWith(w, j + 3)) return "js:" + w;
  }
  return "";
}
const send = Redis.prototype.sendCommand;
Redis.prototype.sendCommand = function (command, stream) {
  const tag = tagOf(command.args || []);
  if (tag) {
    calls[tag] = (calls[tag] || 0) + 1;
    command.promise.then(null, (e) => {
      const m = String(e && e.message);
      if (m.startsWith("NOSCRIPT")) return;
      if (m.includes("heatsink") || m.startsWith("SHED")) refused[tag] = (refused[tag] || 0) + 1;
      else errors[tag] = (errors[tag] || 0) + 1;
      lastError[tag] = m;
    });
  }
  return send.call(this, command, stream);
};

function connect(addr, extra) {
  return cluster ? new Cluster([addr], { redisOptions: extra || {} }) : new Redis({ ...addr, ...(extra || {}) });
}

const clients = addrs.map((a) => connect(a));
const exact = {};
const product = { name: "kettle", price: "39.90", stock: "12", colour: "red" };

// BullMQ: jobs added by every client, processed by one worker per client;
// each added job processed exactly once. The prefix is a hash tag, as
// BullMQ asks on a cluster.
const qPrefix = "{js:queue}";
const queues = addrs.map((a) => new Queue("jobs", { connection: connect(a), prefix: qPrefix }));
const processed = new Map();
let added = 0;
const workers = addrs.map(
  (a) =>
    new Worker("jobs", async (job) => { processed.set(job.id, (processed.get(job.id) || 0) + 1); }, {
      // BullMQ refuses a Worker connection without maxRetriesPerRequest:
      // null (its blocking commands must retry forever, not give up after
      // ioredis' default 20): its documented configuration, not retries off.
      connection: connect(a, { maxRetriesPerRequest: null }), prefix: qPrefix, concurrency: 4,
    })
);

const lbKey = "js:leaderboard", statsKey = "js:stats:page", flagsKey = "js:flags", productKey = "js:product:1";
const lbWant = {}, statsWant = {};
let flagReads = 0, flagWrong = 0, productReads = 0, productWrong = 0;

// rate-limiter-flexible: RateLimiterRedis (its Lua script), 30 points a
// second, asked 200 a second; the fixed window the same limit.
const points = 30;
const luaLim = clients.map((c) => new RateLimiterRedis({ storeClient: c, keyPrefix: "js:lua", points, duration: 1 }));
// The fixed window is hand-written, the pattern of Redis' own docs: INCR
// + EXPIRE of a key per second in MULTI, admitted while INCR's reply is at
// most the limit (rate-limiter-flexible's RateLimiterRedisNonAtomic reads
// and then writes, so concurrent calls of one process over-admit by
// design, through Redis alone too).
const windowSent = {}, windowAdmitted = {};
const window = clients.map((c) => ({
  consume: async () => {
    const key = "js:window:" + Math.floor(Date.now() / 1000);
    const [[e1, n], [e2]] = await c.multi().incr(key).expire(key, 60).exec();
    if (e1 || e2) throw e1 || e2;
    windowSent[key] = (windowSent[key] || 0) + 1;
    if (n > points) throw { limited: true };
    windowAdmitted[key] = (windowAdmitted[key] || 0) + 1;
  },
}));
const lim = { lua: { asked: 0, admitted: 0, first: 0, last: 0 }, window: { asked: 0, admitted: 0, first: 0, last: 0 } };

async function limit(kind, l) {
  const s = lim[kind];
  const now = Date.now();
  if (!s.first) s.first = now;
  s.asked++;
  try {
    await l.consume("api");
    s.admitted++;
  } catch (e) {
    if (e instanceof Error) throw e; // not a limiter's no
  } finally {
    s.last = Date.now();
  }
}

let n = 0;
async function round(i) {
  const c = clients[i];
  const work = [];
  for (let k = 0; k < 10; k++) {
    work.push(queues[i].add("job", { i, k }).then(() => added++, () => {}));
    const p = "player-" + (n++ % 20);
    work.push(c.zincrby(lbKey, 1, p).then(() => { lbWant[p] = (lbWant[p] || 0) + 1; }, () => {}));
    const f = "views-" + (n % 10);
    work.push(c.hincrby(statsKey, f, 1).then(() => { statsWant[f] = (statsWant[f] || 0) + 1; }, () => {}));
    work.push(limit("lua", luaLim[i]).catch(() => {}));
    work.push(limit("window", window[i]).catch(() => {}));
  }
  for (let k = 0; k < 5; k++) {
    work.push(c.zrevrange(lbKey, 0, 4, "WITHSCORES").catch(() => {}));
    work.push(c.hgetall(statsKey).catch(() => {}));
  }
  for (let k = 0; k < 20; k++) {
    const f = (n + k) % 40;
    work.push(c.sismember(flagsKey, "flag-" + f).then((v) => { flagReads++; if ((v === 1) !== (f < 20)) flagWrong++; }, () => {}));
  }
  for (let k = 0; k < 10; k++) {
    work.push(c.hgetall(productKey).then((v) => { productReads++; if (v.name !== product.name || v.stock !== product.stock) productWrong++; }, () => {}));
    work.push(c.hget(productKey, "price").then((v) => { productReads++; if (v !== product.price) productWrong++; }, () => {}));
  }
  await Promise.all(work);
}

async function check() {
  const c = clients[0];
  // Every job added processed exactly once (the workers drain the rest).
  const end = Date.now() + 20000;
  while (processed.size < added && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  let twice = 0;
  for (const v of processed.values()) if (v !== 1) twice++;
  exact["js:queue"] = [twice === 0 && processed.size === added, `${added} jobs added (BullMQ), ${processed.size} processed, ${twice} more than once`];

  const lb = await c.zrange(lbKey, 0, -1, "WITHSCORES");
  let wrong = 0, total = 0, players = 0;
  for (let j = 0; j < lb.length; j += 2) {
    players++;
    total += Number(lb[j + 1]);
    if (Number(lb[j + 1]) !== lbWant[lb[j]]) wrong++;
  }
  wrong += Object.keys(lbWant).length - players;
  exact["js:leaderboard"] = [wrong === 0, `${players} players, total score ${total}, ${wrong} differ from the increments sent`];

  const st = await c.hgetall(statsKey);
  wrong = 0; total = 0;
  for (const [f, want] of Object.entries(statsWant)) {
    total += Number(st[f]);
    if (Number(st[f]) !== want) wrong++;
  }
  exact["js:stats"] = [wrong === 0 && Object.keys(st).length === Object.keys(statsWant).length, `${Object.keys(st).length} fields, total ${total}, ${wrong} differ from the increments sent`];
  exact["js:flags"] = [flagWrong === 0, `${flagReads} SISMEMBER answered, ${flagWrong} wrong`];
  exact["js:product"] = [productWrong === 0, `${productReads} reads answered, ${productWrong} wrong`];
  // A window of 1 s starts at its first consume: over elapsed seconds at
  // most ceil(elapsed) + 1 windows, each admitting at most points.
  const s = lim.lua;
  const elapsed = (s.last - s.first) / 1000;
  const bound = points * (Math.ceil(elapsed) + 1);
  exact["js:lua"] = [s.admitted <= bound, `${s.admitted} of ${s.asked} admitted over ${elapsed.toFixed(1)}s (rate-limiter-flexible), bound ${bound} (${points} a window)`];
  // Per window: at most the limit admitted, the count equal to the INCRs
  // sent, a TTL on every window key.
  let over = 0, differ = 0, noTTL = 0, admitted = 0;
  for (const [key, sent] of Object.entries(windowSent)) {
    admitted += windowAdmitted[key] || 0;
    if ((windowAdmitted[key] || 0) > points) over++;
    if (Number(await c.get(key)) !== sent) differ++;
    if ((await c.ttl(key)) < 0) noTTL++;
  }
  const windows = Object.keys(windowSent).length;
  exact["js:window"] = [over === 0 && differ === 0 && noTTL === 0, `${windows} windows, ${admitted} admitted (limit ${points} a window), ${over} over the limit, ${differ} counts differ from the INCRs sent, ${noTTL} without TTL`];
}

async function main() {
  await Promise.all(clients.map((c) => (c.status === "ready" ? null : new Promise((r) => c.once("ready", r)))));
  const c = clients[0];
  for (const k of [lbKey, statsKey, flagsKey]) await c.del(k);
  for (let f = 0; f < 20; f++) await c.sadd(flagsKey, "flag-" + f);
  await c.hset(productKey, product);
  await queues[0].obliterate({ force: true }).catch(() => {});
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  console.log("ready");
  let running = false;
  const loops = [];
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line === "go") {
      running = true;
      clients.forEach((_, i) => loops.push((async () => {
        while (running) {
          const t = Date.now();
          await round(i);
          const wait = 100 - (Date.now() - t);
          if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        }
      })()));
    } else if (line === "snap") {
      console.log(JSON.stringify({ calls }));
    } else if (line === "stop") {
      running = false;
      await Promise.all(loops);
      await check();
      console.log(JSON.stringify({ calls, refused, errors, lastError, exact }));
      break;
    }
  }
  // BullMQ's workers close once their blocking call returns; on a Cluster
  // connection that can take long: 3 s at most, then exit all the same.
  const closed = Promise.all([...workers.map((w) => w.close()), ...queues.map((q) => q.close())]);
  await Promise.race([closed, new Promise((r) => setTimeout(r, 3000))]);
  clients.forEach((c) => c.disconnect());
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
