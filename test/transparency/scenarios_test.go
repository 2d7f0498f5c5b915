package transparency

import (
	"strconv"
	"strings"
)

// Every key carries the hash tag {t}, so that a scenario's keys share one
// slot: in a cluster, directly, the scenario talks to that slot's master,
// and through the proxy, the proxy routes to it.

func cmds(lines ...string) [][]string {
	out := make([][]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Fields(l)
	}
	return out
}

func one(line string) []string { return strings.Fields(line) }

// deepScript returns a script whose reply nests n tables.
func deepScript(n int) string {
	return "local t = {} local cur = t for i = 1, " + strconv.Itoa(n) + " do local x = {} cur[1] = x cur = x end cur[1] = 7 return t"
}

// busyScript runs for up to 5 s unless killed.
const busyScript = "local t0 = tonumber(redis.call('TIME')[1]) while tonumber(redis.call('TIME')[1]) - t0 < 5 do end return 1"

var scenarios = []scenario{
	{name: "strings", steps: []step{
		{c: "a", cmds: cmds(
			"SET {t}s v", "GET {t}s", "APPEND {t}s w", "STRLEN {t}s", "GETRANGE {t}s 0 0", "SETRANGE {t}s 1 xy", "GET {t}s",
			"GETDEL {t}s", "GET {t}s", "SET {t}n 10", "INCR {t}n", "INCRBY {t}n 5", "DECR {t}n", "DECRBY {t}n 2",
			"INCRBYFLOAT {t}n 1.5", "INCR {t}n", "MSET {t}a 1 {t}b 2", "MGET {t}a {t}b {t}missing", "MSETNX {t}a 3 {t}c 4",
			"SETNX {t}a 9", "GETSET {t}a 5", "SET {t}e 1 EX 100 GET", "SET {t}x 1 NX", "SET {t}x 2 XX KEEPTTL", "GETEX {t}x PERSIST",
			"LCS {t}a {t}b", "SETBIT {t}bits 7 1", "GETBIT {t}bits 7", "BITCOUNT {t}bits", "BITPOS {t}bits 1",
			"BITOP AND {t}dest {t}bits {t}bits", "BITFIELD {t}bf INCRBY u8 0 300", "PFADD {t}h a b", "PFCOUNT {t}h", "PFMERGE {t}h2 {t}h",
			"GET", "SET {t}k", "INCR {t}e", "NOSUCHCOMMAND x", "GET {t}a extra", "SET {t}x 1 EX 0", "SETEX {t}y 100 v", "PSETEX {t}y 100000 v",
		)},
	}},
	{name: "lists", steps: []step{
		{c: "a", cmds: cmds(
			"RPUSH {t}l a b c d", "LPUSH {t}l z", "LRANGE {t}l 0 -1", "LLEN {t}l", "LINDEX {t}l 1", "LPOS {t}l c", "LINSERT {t}l BEFORE c x",
			"LSET {t}l 0 y", "LREM {t}l 1 x", "LTRIM {t}l 0 3", "LMOVE {t}l {t}l2 LEFT RIGHT", "RPOPLPUSH {t}l {t}l2", "LMPOP 2 {t}none {t}l LEFT COUNT 2",
			"LPOP {t}l2 5", "RPOP {t}missing", "LPUSHX {t}missing a", "RPUSHX {t}l2 q", "LPOP {t}l2", "LPOP {t}l2", "SET {t}str v", "LPUSH {t}str a",
		)},
	}},
	{name: "blocking pops are served in the order clients blocked", steps: []step{
		{c: "a", cmd: one("BLPOP {t}q 0"), noRead: true, blocked: 1},
		{c: "b", cmd: one("BLPOP {t}q 0"), noRead: true, blocked: 2},
		{c: "c", cmd: one("RPUSH {t}q first")},
		{c: "a", read: 1},
		{c: "c", cmd: one("RPUSH {t}q second")},
		{c: "b", read: 1},
		{c: "c", cmd: one("LLEN {t}q")},
	}},
	{name: "every blocking list command", steps: []step{
		{c: "a", cmd: one("BRPOP {t}q1 {t}q2 0"), noRead: true, blocked: 1},
		{c: "b", cmd: one("BRPOPLPUSH {t}q3 {t}dst 0"), noRead: true, blocked: 2},
		{c: "c", cmd: one("BLMOVE {t}q4 {t}dst LEFT RIGHT 0"), noRead: true, blocked: 3},
		{c: "d", cmd: one("BLMPOP 0 2 {t}q5 {t}q6 RIGHT COUNT 2"), noRead: true, blocked: 4},
		{c: "e", cmds: cmds("RPUSH {t}q2 x", "RPUSH {t}q3 y", "RPUSH {t}q4 z", "RPUSH {t}q6 m n o")},
		{c: "a", read: 1}, {c: "b", read: 1}, {c: "c", read: 1}, {c: "d", read: 1},
		{c: "e", cmds: cmds("LRANGE {t}dst 0 -1", "LRANGE {t}q6 0 -1")},
		{c: "e", cmds: cmds("BLPOP {t}empty 0.05", "BRPOP {t}empty 0.05", "BLMPOP 0.05 1 {t}empty LEFT", "BLMOVE {t}empty {t}dst LEFT LEFT 0.05")},
	}},
	{name: "commands pipelined behind a blocking one wait for it", steps: []step{
		{c: "a", cmds: cmds("BLPOP {t}q 0", "SET {t}after-blpop 1", "GET {t}seen"), noRead: true, blocked: 1},
		{c: "b", cmds: cmds("EXISTS {t}after-blpop", "SET {t}seen yes", "RPUSH {t}q go")},
		{c: "a", read: 3},
	}},
	{name: "a blocked client that disconnects takes nothing", steps: []step{
		{c: "a", cmd: one("BLPOP {t}q 0"), noRead: true, blocked: 1},
		{c: "a", close: true, unblocked: true},
		{c: "b", cmds: cmds("RPUSH {t}q x", "LLEN {t}q")},
	}},
	// In a cluster, a client's connection through the proxy is one
	// connection per master: CLIENT ID names the one to the first master
	// (docs/proxy.md).
	{name: "CLIENT UNBLOCK", standaloneOnly: true, steps: []step{
		{c: "a", cmd: one("CLIENT ID"), save: "ida", mask: anyInt},
		{c: "a", cmd: one("BLPOP {t}q 0"), noRead: true, blocked: 1},
		{c: "b", cmd: one("CLIENT UNBLOCK ${ida}")},
		{c: "a", read: 1},
		{c: "a", cmd: one("BZPOPMIN {t}z 0"), noRead: true, blocked: 1},
		{c: "b", cmd: one("CLIENT UNBLOCK ${ida} ERROR")},
		{c: "a", read: 1},
		{c: "b", cmd: one("CLIENT UNBLOCK 999999999")},
	}},
	{name: "hashes", steps: []step{
		{c: "a", cmds: cmds(
			"HSET {t}h f1 1 f2 2", "HGET {t}h f1", "HMGET {t}h f1 nope", "HGETALL {t}h", "HINCRBY {t}h f1 3", "HINCRBYFLOAT {t}h f2 0.5",
			"HKEYS {t}h", "HVALS {t}h", "HLEN {t}h", "HEXISTS {t}h f9", "HSTRLEN {t}h f1", "HSETNX {t}h f1 x", "HDEL {t}h f2 f9",
			"HRANDFIELD {t}h", "HSCAN {t}h 0", "HGET {t}missing f", "SET {t}str v", "HGET {t}str f",
		)},
	}},
	{name: "sets", steps: []step{
		{c: "a", cmds: cmds(
			"SADD {t}s1 a b c", "SADD {t}s2 b", "SISMEMBER {t}s1 a", "SMISMEMBER {t}s1 a z", "SCARD {t}s1", "SREM {t}s1 c",
			"SINTER {t}s1 {t}s2", "SINTERCARD 2 {t}s1 {t}s2", "SDIFF {t}s1 {t}s2", "SUNIONSTORE {t}s3 {t}s2", "SMOVE {t}s1 {t}s4 a",
			"SMEMBERS {t}s4", "SPOP {t}s4", "SRANDMEMBER {t}s2", "SSCAN {t}s2 0",
		)},
	}},
	{name: "sorted sets", steps: []step{
		{c: "a", cmds: cmds(
			"ZADD {t}z 1 a 2 b 3 c", "ZRANGE {t}z 0 -1 WITHSCORES", "ZSCORE {t}z b", "ZMSCORE {t}z a zz", "ZINCRBY {t}z 1.5 a",
			"ZRANK {t}z a", "ZREVRANK {t}z a", "ZCOUNT {t}z 1 3", "ZRANGEBYSCORE {t}z 2 +inf", "ZRANGEBYLEX {t}z - +",
			"ZPOPMIN {t}z", "ZPOPMAX {t}z", "ZADD {t}z2 5 x", "ZUNIONSTORE {t}z3 2 {t}z {t}z2 WEIGHTS 2 1", "ZRANGESTORE {t}z4 {t}z3 0 0",
			"ZMPOP 1 {t}z3 MIN", "ZREMRANGEBYRANK {t}z3 0 -1", "ZCARD {t}z3", "ZADD {t}z nan a",
		)},
	}},
	{name: "blocking sorted-set pops", steps: []step{
		{c: "a", cmd: one("BZPOPMIN {t}z1 0"), noRead: true, blocked: 1},
		{c: "b", cmd: one("BZPOPMAX {t}z2 0"), noRead: true, blocked: 2},
		{c: "c", cmd: one("BZMPOP 0 1 {t}z3 MAX COUNT 2"), noRead: true, blocked: 3},
		{c: "d", cmds: cmds("ZADD {t}z1 1 a 2 b", "ZADD {t}z2 1 a 2 b", "ZADD {t}z3 1 a 2 b 3 c")},
		{c: "a", read: 1}, {c: "b", read: 1}, {c: "c", read: 1},
		{c: "d", cmds: cmds("BZPOPMIN {t}empty 0.05", "BZMPOP 0.05 1 {t}empty MIN")},
	}},
	{name: "streams and consumer groups", steps: []step{
		{c: "a", cmds: cmds(
			"XADD {t}st 1-1 f v", "XADD {t}st 2-1 f w", "XRANGE {t}st - +", "XREVRANGE {t}st + - COUNT 1", "XLEN {t}st",
			"XGROUP CREATE {t}st g 0", "XREADGROUP GROUP g c1 COUNT 1 STREAMS {t}st >", "XPENDING {t}st g", "XACK {t}st g 1-1",
			"XREADGROUP GROUP g c1 STREAMS {t}st >", "XCLAIM {t}st g c2 0 2-1 JUSTID", "XAUTOCLAIM {t}st g c3 0 0-0 JUSTID", "XDEL {t}st 1-1",
			"XTRIM {t}st MAXLEN 1", "XREAD COUNT 1 STREAMS {t}st 0", "XADD {t}st 1-1 f v", "XGROUP CREATE {t}st g 0",
		)},
		{c: "a", cmd: one("XINFO STREAM {t}st"), mask: shape},
	}},
	{name: "XREAD and XREADGROUP BLOCK", steps: []step{
		{c: "a", cmd: one("XADD {t}st 1-1 f v")},
		{c: "a", cmd: one("XGROUP CREATE {t}st g $")},
		{c: "a", cmd: one("XREAD BLOCK 0 STREAMS {t}st $"), noRead: true, blocked: 1},
		{c: "b", cmd: one("XREADGROUP GROUP g c1 BLOCK 0 STREAMS {t}st >"), noRead: true, blocked: 2},
		{c: "c", cmd: one("XADD {t}st 5-1 f w")},
		{c: "a", read: 1}, {c: "b", read: 1},
		{c: "c", cmds: cmds("XREAD BLOCK 50 STREAMS {t}st $", "XPENDING {t}st g")},
	}},
	{name: "UNSUBSCRIBE without a subscription, then commands", steps: []step{
		{c: "a", cmd: one("UNSUBSCRIBE a:${run} b:${run} c:${run}"), read: 3},
		{c: "a", cmds: cmds("PING", "SET {t}k v", "GET {t}k", "ECHO hi")},
		{c: "a", cmd: one("PUNSUBSCRIBE"), read: 1},
		{c: "a", cmd: one("UNSUBSCRIBE"), read: 1},
		{c: "a", cmd: one("SUNSUBSCRIBE"), read: 1},
		{c: "a", cmds: cmds("PING", "GET {t}k")},
	}},
	{name: "pub/sub: channels and patterns", steps: []step{
		{c: "a", cmd: one("SUBSCRIBE ch1:${run} ch2:${run}"), read: 2},
		{c: "b", cmd: one("PUBLISH ch1:${run} hello")},
		{c: "a", read: 1},
		{c: "a", cmd: one("PSUBSCRIBE ch*:${run}"), read: 1},
		{c: "b", cmd: one("PUBLISH ch2:${run} both")},
		{c: "a", read: 2},
		{c: "a", cmd: one("PING"), read: 1},
		{c: "a", cmd: one("UNSUBSCRIBE ch1:${run}"), read: 1},
		{c: "b", cmds: cmds("PUBLISH ch1:${run} pattern-only", "PUBSUB NUMSUB ch1:${run} ch2:${run}", "PUBSUB NUMPAT")},
		{c: "a", read: 1},
		{c: "a", cmd: one("PUNSUBSCRIBE ch*:${run}"), read: 1},
		{c: "a", cmd: one("UNSUBSCRIBE ch2:${run}"), read: 1},
		{c: "a", cmds: cmds("PING", "ECHO back")},
	}},
	// Redis' own test (tests/unit/pubsub.tcl, 7.0): PUNSUBSCRIBE is sent
	// and, without waiting for its replies, another client publishes on
	// each pattern: no receiver. The subscribed client's input reaches
	// Redis in the order the proxy read it (docs/proxy.md, Ordering);
	// TestPublishAfterPunsubscribeWithoutWaiting plays it 300 times.
	{name: "PUBLISH/PSUBSCRIBE after PUNSUBSCRIBE without arguments", steps: []step{
		{c: "a", cmd: one("PSUBSCRIBE chan1.*:${run} chan2.*:${run} chan3.*:${run}"), read: 3},
		{c: "a", cmd: one("PUNSUBSCRIBE"), noRead: true},
		{c: "b", cmd: one("PUBLISH chan1.hi:${run} hello")},
		{c: "b", cmd: one("PUBLISH chan2.hi:${run} hello")},
		{c: "b", cmd: one("PUBLISH chan3.hi:${run} hello")},
		{c: "a", read: 3},
		{c: "a", cmd: one("PING")},
	}},
	{name: "sharded pub/sub", steps: []step{
		{c: "a", cmd: one("SSUBSCRIBE {t}sch:${run}"), read: 1},
		{c: "b", cmd: one("SPUBLISH {t}sch:${run} hello")},
		{c: "a", read: 1},
		{c: "a", cmd: one("SUNSUBSCRIBE {t}sch:${run}"), read: 1},
		{c: "b", cmds: cmds("SPUBLISH {t}sch:${run} nobody", "PUBSUB SHARDNUMSUB {t}sch:${run}")},
	}},
	{name: "RESP3 push on a connection that also runs commands", standaloneOnly: true, steps: []step{
		{c: "a", cmd: one("HELLO 3"), mask: shape},
		{c: "a", cmd: one("SUBSCRIBE news:${run}"), read: 1},
		{c: "a", cmds: cmds("SET {t}k v", "GET {t}k")},
		{c: "b", cmd: one("PUBLISH news:${run} flash")},
		{c: "a", read: 1},
		{c: "a", cmds: cmds("PING", "UNSUBSCRIBE news:${run}")},
		{c: "a", cmd: one("GET {t}k")},
	}},
	{name: "MONITOR", standaloneOnly: true, steps: []step{
		{c: "a", cmd: one("MONITOR")},
		{c: "b", cmd: one("SET {t}m v")},
		{c: "a", read: 1, mask: shape},
	}},
	{name: "transactions", steps: []step{
		{c: "a", cmds: cmds("MULTI", "SET {t}x 1", "INCR {t}x", "GET {t}x", "EXEC")},
		{c: "a", cmds: cmds("MULTI", "INCR {t}x", "DISCARD", "GET {t}x", "EXEC", "DISCARD")},
		{c: "a", cmds: cmds("MULTI", "MULTI", "SET {t}x", "INCR {t}x", "EXEC", "GET {t}x")},
		{c: "a", cmds: cmds("SET {t}s str", "MULTI", "INCR {t}s", "SET {t}y 2", "EXEC", "GET {t}y")},
	}},
	{name: "WATCH sees another client's write", steps: []step{
		{c: "a", cmds: cmds("WATCH {t}w", "GET {t}w")},
		{c: "b", cmd: one("SET {t}w changed")},
		{c: "a", cmds: cmds("MULTI", "SET {t}w mine", "EXEC", "GET {t}w")},
		{c: "a", cmds: cmds("WATCH {t}w", "UNWATCH", "MULTI", "SET {t}w mine", "EXEC")},
		{c: "a", cmds: cmds("MULTI", "WATCH {t}w", "EXEC")},
	}},
	{name: "scripting", steps: []step{
		{c: "a", cmds: [][]string{
			{"EVAL", "return {1, 'two', {3, 'four'}, redis.status_reply('OK'), false}", "0"},
			{"EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "{t}k", "v"},
			{"EVAL", "return redis.call('GET', KEYS[1])", "1", "{t}k"},
			{"EVAL", "return redis.error_reply('MYERR custom')", "0"},
			{"EVAL", "return redis.call('GET')", "0"},
			{"EVAL", "return redis.pcall('INCR', KEYS[1])", "1", "{t}k"},
			{"EVAL", "return 3.99", "0"},
			{"EVAL", "syntax error here", "0"},
			{"SCRIPT", "LOAD", "return 42"},
			{"EVALSHA", "1fa00e76656cc152ad327c13fe365858fd7be306", "0"},
			{"EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"},
			{"SCRIPT", "EXISTS", "1fa00e76656cc152ad327c13fe365858fd7be306"},
			{"EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "{t}k"},
			{"EVAL_RO", "return redis.call('SET', KEYS[1], 'x')", "1", "{t}k"},
		}},
	}},
	{name: "a script's deep reply", steps: []step{
		{c: "a", cmd: []string{"EVAL", deepScript(1000), "0"}},
		{c: "a", cmd: []string{"EVAL", deepScript(5000), "0"}},
		{c: "a", cmd: one("PING")},
	}},
	{name: "a long script: others get BUSY, SCRIPT KILL stops it", setup: [][]string{{"CONFIG", "SET", "busy-reply-threshold", "100"}}, steps: []step{
		{c: "a", cmd: []string{"EVAL", busyScript, "1", "{t}k"}, noRead: true, busy: true},
		{c: "b", cmd: one("GET {t}k")},
		{c: "b", cmd: one("SCRIPT KILL")},
		{c: "a", read: 1},
		{c: "b", cmds: cmds("PING", "SCRIPT KILL")},
	}},
	{name: "functions", steps: []step{
		{c: "a", cmd: []string{"FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function{function_name='get2', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}}\nredis.register_function{function_name='ro', callback=function(keys, args) return 1 end, flags={'no-writes'}}"}},
		{c: "a", cmds: [][]string{{"SET", "{t}k", "v"}, {"FCALL", "get2", "1", "{t}k"}, {"FCALL_RO", "ro", "0"}, {"FCALL", "nosuch", "0"}}},
		// The order of a library's functions is the node's hash order, so
		// both have the same shape (flags no-writes) and only shapes are compared.
		{c: "a", cmd: one("FUNCTION LIST"), mask: shape},
		{c: "a", cmd: []string{"FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('x', function() return 1 end)"}},
	}},
	{name: "a long function: FUNCTION KILL stops it", setup: [][]string{{"CONFIG", "SET", "busy-reply-threshold", "100"}}, steps: []step{
		{c: "a", cmd: []string{"FUNCTION", "LOAD", "#!lua name=busy\nredis.register_function{function_name='spin', callback=function(keys, args) " + busyScript + " end, flags={'no-writes'}}"}},
		{c: "a", cmd: one("FCALL spin 1 {t}k"), noRead: true, busy: true},
		{c: "b", cmd: one("GET {t}k")},
		{c: "b", cmd: one("FUNCTION KILL")},
		{c: "a", read: 1},
		{c: "b", cmd: one("PING")},
	}},
	{name: "expiry", steps: []step{
		{c: "a", cmds: cmds(
			"SET {t}k v", "EXPIREAT {t}k 4000000000", "EXPIRETIME {t}k", "PEXPIRETIME {t}k", "PERSIST {t}k", "TTL {t}k",
			"EXPIRE {t}k 100 NX", "EXPIRE {t}k 50 GT", "SET {t}gone v", "EXPIREAT {t}gone 1", "GET {t}gone", "TTL {t}gone", "PEXPIRE {t}k 0", "EXISTS {t}k",
		)},
		{c: "a", cmd: one("TTL {t}k"), mask: anyInt},
	}},
	{name: "keyspace", steps: []step{
		{c: "a", cmds: cmds(
			"SET {t}a 1", "SET {t}b 2", "EXISTS {t}a {t}b {t}c", "TYPE {t}a", "RENAME {t}a {t}c", "RENAMENX {t}c {t}b", "COPY {t}b {t}d",
			"DEL {t}b {t}x", "UNLINK {t}d", "TOUCH {t}c", "OBJECT ENCODING {t}c", "OBJECT REFCOUNT {t}c", "OBJECT FREQ {t}c",
			"RPUSH {t}l 3 1 2", "SORT {t}l", "SORT_RO {t}l DESC", "SORT {t}l STORE {t}sorted", "LRANGE {t}sorted 0 -1", "RENAME {t}nope {t}x",
		)},
		{c: "a", cmd: one("DUMP {t}c"), save: "dump"},
		{c: "a", cmds: [][]string{{"RESTORE", "{t}r", "0", "${dump}"}, {"GET", "{t}r"}, {"RESTORE", "{t}r", "0", "${dump}"}, {"MEMORY", "USAGE", "{t}r"}}},
	}},
	{name: "keyspace: node-wide commands", standaloneOnly: true, steps: []step{
		{c: "a", cmds: cmds("SET {t}only 1", "DBSIZE", "KEYS *", "RANDOMKEY", "SCAN 0", "SELECT 2", "SET {t}db2 x", "MOVE {t}db2 0", "SELECT 0", "GET {t}db2",
			"SWAPDB 0 3", "DBSIZE", "SWAPDB 0 3", "FLUSHDB", "DBSIZE")},
	}},
	// Node-wide commands on a keyspace of one slot: directly, the one
	// master of {t}; through a cluster-mode proxy, every master, merged
	// (the other masters are empty). SCAN's cursors differ (the proxy's
	// carry the node), so only its errors are compared here; its full
	// iterations are tested in dataplane/proxy (nodewide_test.go).
	{name: "node-wide commands", steps: []step{
		{c: "a", cmds: cmds("SET {t}a 1", "SET {t}b 2 EX 1000", "RPUSH {t}l x", "DBSIZE", "KEYS *", "KEYS {t}?", "KEYS nomatch*")},
		{c: "a", cmd: one("RANDOMKEY"), mask: shape},
		{c: "a", cmd: one("INFO keyspace"), mask: anyTTL},
		{c: "a", cmds: cmds("INFO", "INFO everything", "INFO server keyspace"), mask: keyspaceOnly},
		{c: "a", cmds: cmds("SCAN abc", "SCAN 0 COUNT x", "SCAN 0 TYPE", "SCAN", "KEYS", "DBSIZE x", "FLUSHDB LATER", "RANDOMKEY x")},
		{c: "a", cmds: cmds("FLUSHDB", "DBSIZE", "RANDOMKEY", "KEYS *", "INFO keyspace", "SET {t}c 3", "FLUSHALL ASYNC", "DBSIZE",
			"SET {t}d 4", "FLUSHDB SYNC", "EXISTS {t}d", "FLUSHALL SYNC", "SCAN 0")},
	}},
	// WAIT after writes (no replica here: 0, at once or at the timeout),
	// inside MULTI (queued, answered at EXEC), its argument errors, and
	// WAITAOF, which Redis 7.0 does not know. With a replica:
	// TestWaitCountsTheClientsWrites (dataplane/proxy).
	{name: "WAIT", steps: []step{
		{c: "a", cmds: cmds("SET {t}k 1", "WAIT 0 0", "INCR {t}k", "WAIT 1 20", "WAIT 0 20", "WAIT -1 0")},
		{c: "a", cmds: cmds("MULTI", "SET {t}k 2", "WAIT 1 0", "EXEC")},
		{c: "a", cmds: cmds("WAIT x 0", "WAIT 1 -1", "WAIT 1 x", "WAIT 1", "WAIT 1 2 3", "WAITAOF 0 0 0", "GET {t}k")},
	}},
	// CLIENT KILL naming the client's own connection (by the ID CLIENT ID
	// gave), or none (TYPE master or replica, an LADDR or a USER no
	// connection has): Redis' replies, and the connection closed when it
	// killed itself.
	{name: "CLIENT KILL of the own connection", setup: [][]string{{"ACL", "SETUSER", "idle", "on", "nopass"}}, steps: []step{
		{c: "a", cmd: one("CLIENT ID"), save: "id", mask: anyInt},
		{c: "a", cmds: [][]string{{"CLIENT", "KILL", "ID", "${id}"}, {"CLIENT", "KILL", "ID", "${id}", "SKIPME", "yes"},
			{"CLIENT", "KILL", "ID", "${id}", "TYPE", "pubsub", "SKIPME", "no"}, {"CLIENT", "KILL", "1.1.1.1:1111"},
			{"CLIENT", "KILL", "ADDR", "1.1.1.1:1111"}, {"CLIENT", "KILL", "TYPE", "greg"}, {"CLIENT", "KILL", "ID", "0"},
			{"CLIENT", "KILL", "ID", "1", "SKIPME"}, {"CLIENT", "KILL", "USER", "nosuchuser"}, {"CLIENT", "KILL"},
			{"CLIENT", "KILL", "TYPE", "master"}, {"CLIENT", "KILL", "TYPE", "replica", "SKIPME", "no"}, {"CLIENT", "KILL", "TYPE", "slave"},
			{"CLIENT", "KILL", "LADDR", "1.2.3.4:5"}, {"CLIENT", "KILL", "USER", "idle", "TYPE", "normal", "SKIPME", "no"},
			{"CLIENT", "KILL", "MAXAGE", "100"}, {"CLIENT", "KILL", "USER", "idle", "ID", "${id}", "SKIPME", "no"}, {"PING"}}},
		{c: "a", cmds: [][]string{{"CLIENT", "KILL", "USER", "default", "TYPE", "normal", "ID", "${id}", "SKIPME", "no"}, {"PING"}}, untilClose: true},
		{c: "b", cmd: one("PING")},
	}},
	{name: "CLIENT subcommands", steps: []step{
		{c: "a", cmd: one("CLIENT ID"), mask: anyInt},
		{c: "a", cmds: cmds("CLIENT SETNAME app", "CLIENT GETNAME", "CLIENT NO-EVICT on", "CLIENT NO-TOUCH on", "CLIENT GETREDIR", "CLIENT SETNAME bad name", "CLIENT NOSUCH")},
		{c: "a", cmd: one("CLIENT INFO"), mask: shape},
		{c: "a", cmd: one("CLIENT LIST"), mask: shape},
	}},
	{name: "CLIENT REPLY OFF, SKIP, ON", steps: []step{
		{c: "a", cmds: cmds("SET {t}k 1", "CLIENT REPLY SKIP", "INCR {t}k", "INCR {t}k", "CLIENT REPLY OFF", "INCR {t}k", "GET {t}k", "NOSUCH", "CLIENT REPLY SKIP", "CLIENT REPLY ON", "GET {t}k"), read: 4},
		{c: "a", cmds: cmds("CLIENT REPLY bogus", "CLIENT REPLY", "PING")},
	}},
	{name: "client-side caching: RESP3 invalidation push", standaloneOnly: true, fixedProto: true, steps: []step{
		{c: "a", cmd: one("HELLO 3"), mask: shape},
		{c: "a", cmds: cmds("CLIENT TRACKING ON", "SET {t}tk 1", "GET {t}tk")},
		{c: "b", cmd: one("SET {t}tk 2")},
		{c: "a", read: 1},
		{c: "a", cmds: cmds("GET {t}tk", "CLIENT TRACKINGINFO")},
	}},
	{name: "client-side caching: RESP2 with REDIRECT", standaloneOnly: true, fixedProto: true, steps: []step{
		{c: "inv", cmd: one("CLIENT ID"), save: "inv", mask: anyInt},
		{c: "inv", cmd: one("SUBSCRIBE __redis__:invalidate"), read: 1},
		{c: "a", cmds: [][]string{{"CLIENT", "TRACKING", "ON", "REDIRECT", "${inv}"}, {"GET", "{t}tk"}}},
		{c: "b", cmd: one("SET {t}tk 2")},
		{c: "inv", read: 1},
		{c: "a", cmd: one("CLIENT GETREDIR"), mask: anyInt},
	}},
	{name: "HELLO and AUTH", fixedProto: true, setup: [][]string{{"ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all"}}, steps: []step{
		{c: "a", cmd: one("HELLO 3 AUTH alice pw"), mask: shape},
		{c: "a", cmds: cmds("ACL WHOAMI", "SET {t}k v", "GET {t}k")},
		{c: "b", cmd: one("HELLO 2 AUTH alice wrong")},
		{c: "b", cmds: cmds("ACL WHOAMI", "AUTH alice pw", "ACL WHOAMI", "AUTH nobody x", "ACL WHOAMI", "HELLO 4")},
		{c: "b", cmd: one("HELLO 2 SETNAME me"), mask: shape},
		{c: "b", cmd: one("CLIENT GETNAME")},
		{c: "c", cmds: cmds("HELLO", "HELLO 3"), mask: shape},
		{c: "c", cmds: cmds("PING", "RESET", "PING")},
	}},
	{name: "inline commands", steps: []step{
		{c: "a", raw: "SET \"{t}a b\" \"c\\\"d\"\r\nGET \"{t}a b\"\r\nECHO 'it\\'s'\r\nECHO \"\\x41\\n\"\r\n\r\n  PING  \r\nSET {t}e \"\"\r\nSTRLEN {t}e\n", read: 6},
	}},
	{name: "inline command with unbalanced quotes", steps: []step{
		{c: "a", raw: "PING\r\nSET {t}x \"unbalanced\r\nGET {t}x\r\n", untilClose: true},
		{c: "b", cmd: one("EXISTS {t}x")},
	}},
	{name: "random bytes", steps: []step{
		{c: "a", raw: "\x01\x02garbage line\r\nmore 'stuff here\r\n*x\r\n", untilClose: true},
		{c: "b", raw: "\xff\xfe\x00\x10PING\r\n", read: 0},
		{c: "b", close: true},
		{c: "c", raw: "hello world\nECHO ok\r\n", read: 2},
	}},
	{name: "protocol errors", steps: []step{
		{c: "a", raw: "*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n", untilClose: true},
		{c: "b", raw: "*2\r\n$4\r\nECHO\r\n+x\r\n", untilClose: true},
		{c: "c", raw: "*01\r\n$4\r\nPING\r\n", untilClose: true},
		{c: "d", raw: "*1\r\n$536870913\r\n", untilClose: true},
		{c: "e", raw: "*1\r\n$4\r\nPINGxx*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", read: 2},
		{c: "f", raw: "*2147483648\r\n", untilClose: true},
	}},
	{name: "OBJECT, MEMORY, CONFIG, INFO", steps: []step{
		{c: "a", cmds: cmds("SET {t}k 12345", "OBJECT ENCODING {t}k", "OBJECT HELP", "MEMORY USAGE {t}k", "CONFIG GET maxmemory-policy",
			"CONFIG SET maxmemory-policy allkeys-lru", "CONFIG GET maxmemory-policy", "CONFIG SET maxmemory-policy noeviction", "CONFIG GET nosuchparam",
			"CONFIG SET nosuchparam 1")},
		{c: "a", cmd: one("MEMORY DOCTOR"), mask: shape},
		{c: "a", cmd: one("INFO keyspace"), mask: shape},
		{c: "a", cmd: one("TIME"), mask: shape},
		{c: "a", cmd: one("COMMAND COUNT"), mask: anyInt},
	}},
	// A cluster client's start-up commands, answered by the sidecar as a
	// one-node cluster (dataplane/proxy/topology.go): where a cluster node
	// gives the same bytes (READONLY, KEYSLOT) or the same shape (its id,
	// its INFO and NODES text), they must match; the slot map itself
	// differs by design (one node owning every slot) and is covered by
	// dataplane/proxy's topology tests and test/clients.
	{name: "cluster client start-up", clusterOnly: true, steps: []step{
		{c: "a", cmds: cmds("READONLY", "READWRITE", "CLUSTER KEYSLOT {t}k", "CLUSTER KEYSLOT somekey", "CLUSTER SLOTS x", "CLUSTER REPLICAS")},
		{c: "a", cmd: one("CLUSTER MYID"), mask: shape},
		{c: "a", cmd: one("CLUSTER INFO"), mask: shape},
		{c: "a", cmd: one("CLUSTER NODES"), mask: shape},
		{c: "a", cmd: one("INFO cluster")},
		{c: "a", cmds: cmds("MULTI", "CLUSTER KEYSLOT {t}k", "EXEC")},
		// Counted on the master of the slot named (15891 is {t}'s).
		{c: "a", cmds: cmds("SET {t}k v", "CLUSTER COUNTKEYSINSLOT 15891", "CLUSTER GETKEYSINSLOT 15891 10", "CLUSTER COUNTKEYSINSLOT 99999")},
	}},
	{name: "large values", steps: []step{
		{c: "a", cmd: []string{"SET", "{t}big", strings.Repeat("v", 20<<20)}},
		{c: "a", cmds: cmds("STRLEN {t}big", "GET {t}big", "APPEND {t}big x", "GETRANGE {t}big -3 -1")},
	}},
	// Values over 1 MiB are streamed by the proxy (passed on as they
	// arrive), in pipelines, with arguments after them; MSET's are held
	// whole (its keys follow the value).
	{name: "large values streamed among other commands", steps: []step{
		{c: "a", cmds: [][]string{
			{"SET", "{t}n", "1"}, {"SET", "{t}v", strings.Repeat("a", 2<<20), "EX", "1000"}, {"INCR", "{t}n"},
			{"HSET", "{t}h", "f", strings.Repeat("b", 3<<20), "g", "small"}, {"HGET", "{t}h", "g"}, {"HSTRLEN", "{t}h", "f"},
			{"RPUSH", "{t}l", strings.Repeat("c", 2<<20), "x"}, {"LLEN", "{t}l"}, {"RPOP", "{t}l"},
			{"MSET", "{t}m1", strings.Repeat("d", 2<<20), "{t}m2", "x"}, {"STRLEN", "{t}m1"}, {"GET", "{t}m2"},
			{"SET", "{t}v2", strings.Repeat("e", 2<<20), "NOSUCHOPTION"}, {"EXISTS", "{t}v2"}, {"TTL", "{t}v"}, {"GET", "{t}v"},
		}},
		{c: "b", cmds: cmds("STRLEN {t}v", "PING")},
	}},
	{name: "a malformed argument after a large value", steps: []step{
		{c: "a", raw: "*4\r\n$3\r\nSET\r\n$4\r\n{t}k\r\n$2097152\r\n" + strings.Repeat("v", 2<<20) + "\r\n+EX\r\n", untilClose: true},
		{c: "b", cmds: cmds("EXISTS {t}k", "PING")},
	}},
	{name: "a reply of 1.1 million elements", steps: append(bigList(), step{c: "a", cmds: cmds("LLEN {t}big", "LRANGE {t}big 0 -1", "PING")})},
	{name: "QUIT", steps: []step{
		{c: "a", cmds: cmds("SET {t}q 1", "QUIT", "SET {t}q 2"), untilClose: true},
		{c: "b", cmd: one("GET {t}q")},
	}},
}

// bigList fills {t}big with 1.1M elements, 10k per command.
func bigList() []step {
	var out []step
	for i := 0; i < 110; i++ {
		cmd := []string{"RPUSH", "{t}big"}
		for j := 0; j < 10000; j++ {
			cmd = append(cmd, strconv.Itoa(i*10000+j))
		}
		out = append(out, step{c: "a", cmd: cmd, mask: anyInt})
	}
	return out
}
