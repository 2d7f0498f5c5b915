// Package command is heatsink's one table of Redis commands: where a
// command's keys are, whether it may write, whether it acts only on a
// non-string type, and how it uses its connection (state it leaves behind,
// blocking, streams of unrequested replies). The engine's classification
// of commands on mitigated keys, the proxy's routing decision, the
// go-redis hook and the node agent's packet capture all look commands up
// here, so no two of them can disagree about a command. It lives beside
// the routing table, not in the data plane's folder, because the node
// agent reads it too, and the node agent imports nothing of the sidecar.
package command

import (
	"bytes"
	"strconv"

	"github.com/heatsink-dev/heatsink/routing"
)

// Kind says how a command uses its connection beyond one request and one
// reply on it.
type Kind uint8

const (
	// Plain commands are one request and one reply.
	Plain Kind = iota
	// State commands (AUTH, SELECT, HELLO, RESET) change connection state
	// that a proxy can replay on another connection to the same server.
	State
	// Quit closes the connection after its reply.
	Quit
	// Multi opens a transaction.
	Multi
	// EndTx (EXEC, DISCARD) ends one.
	EndTx
	// Watch and Unwatch change the keys a transaction checks.
	Watch
	Unwatch
	// PubSub commands (SUBSCRIBE, UNSUBSCRIBE and their pattern and shard
	// forms, MONITOR) may be answered by any number of frames, and put the
	// connection in a mode where Redis sends frames nobody asked for.
	PubSub
	// Unsubscribe commands (UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE) on a
	// connection that subscribed to nothing: Redis answers one frame per
	// channel named (one when none is), pushes in RESP3, and the
	// connection stays as it was.
	Unsubscribe
	// ClusterWide commands act on every node of a cluster (KEYS, SCAN,
	// FLUSHALL, ...).
	ClusterWide
	// Replication commands (SYNC, PSYNC, REPLCONF) turn the connection into
	// a replication stream.
	Replication
)

// Info is what the data plane knows about a command.
type Info struct {
	// Write: the command may change a key. A raw write on a mitigated key
	// must drop the key's cached copy.
	Write bool
	// Typed: the command acts on a hash, list, set, sorted set or stream,
	// never on the string values the engine replicates, so on a replicated
	// key it is exact when sent raw (Redis answers WRONGTYPE if the key
	// holds a string).
	Typed bool
	// Kind is how the command uses its connection.
	Kind Kind
	// Blocking commands may wait in Redis for as long as the client asked
	// (BLPOP, WAIT, ...): they need a connection of their own. XREAD and
	// XREADGROUP block only with BLOCK; see IsBlocking.
	Blocking bool
	// Scripting commands (EVAL, FCALL and their forms) run a script, which
	// may keep Redis busy for as long as it runs: meanwhile Redis answers
	// other connections BUSY, and only SCRIPT KILL or FUNCTION KILL sent on
	// another connection stops it.
	Scripting bool
	// ReadOnly commands never change a key (Redis' readonly flag). With
	// Nondeterministic false, a key spec that names every key, and one
	// key named, the reply is a function of the request and that key's
	// value: the engine may share and cache it (Cacheable).
	ReadOnly bool
	// Nondeterministic commands may answer the same request on the same
	// value differently: randomness (SRANDMEMBER, ZRANDMEMBER,
	// HRANDFIELD), time (TTL, PTTL, HTTL, HPTTL), cursors and server state
	// (the SCAN family, OBJECT, MEMORY, XINFO, XPENDING's idle times):
	// Redis' nondeterministic_output tip, plus the reads of a remaining
	// time, which a cached reply would freeze.
	Nondeterministic bool
	// Shareable commands may go through an upstream connection shared with
	// other clients: they leave no state on it, their reply depends on
	// nothing but the command, they never block it, and they cannot keep
	// Redis busy so that the commands of others queued behind them would
	// get their replies late rather than Redis' own BUSY error (scripts and
	// functions are not shareable for that reason).
	Shareable bool
	// first is the index of the first key; 0 means keyless, keyMovable
	// that the position depends on other arguments.
	first int8
	keys  keySpec
	// incomplete: the command may read keys it does not name (SORT_RO's
	// BY and GET patterns; Redis' key spec "incomplete" flag): a write to
	// those keys would not be seen as a write to the named one.
	incomplete bool
	// family is what the command does to its key (FamilyOf).
	family routing.Families
}

// keySpec locates the keys of a command beyond its first.
type keySpec uint8

const (
	keysFirst   keySpec = iota // only the first key (or none)
	keysAll                    // every argument from the first key on
	keysPairs                  // key value key value ... (MSET)
	keysTwo                    // two keys in a row (RENAME src dst ...)
	keysNumkeys                // numkeys key... (EVAL, ZUNION, LMPOP, ...)
	keysStore                  // dest numkeys key... (ZUNIONSTORE)
)

const keyMovable = -1

// table lists the commands the data plane knows. A command not listed is
// unknown: it names no key the engine could mitigate, and a proxy gives it
// a connection of its own (it may leave state there).
var table = func() map[string]Info {
	m := map[string]Info{}
	set := func(c Info, names ...string) {
		for _, n := range names {
			m[n] = c
		}
	}
	read, write := Info{first: 1, ReadOnly: true}, Info{first: 1, Write: true}
	typedRead, typedWrite := Info{first: 1, Typed: true, ReadOnly: true}, Info{first: 1, Write: true, Typed: true}
	set(read, "GET", "GETRANGE", "STRLEN", "SUBSTR", "TYPE", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME",
		"GETBIT", "BITCOUNT", "BITPOS", "BITFIELD_RO", "DUMP", "SORT_RO")
	set(write, "SET", "SETNX", "SETEX", "PSETEX", "GETSET", "GETDEL", "GETEX", "APPEND", "SETRANGE",
		"INCR", "DECR", "INCRBY", "DECRBY", "INCRBYFLOAT", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "PERSIST",
		"RESTORE", "SORT", "SETBIT", "BITFIELD", "PFADD", "GEORADIUS", "GEORADIUSBYMEMBER")
	set(typedRead, "HGET", "HMGET", "HGETALL", "HKEYS", "HVALS", "HLEN", "HEXISTS", "HSTRLEN", "HRANDFIELD", "HSCAN",
		"HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME",
		"LRANGE", "LLEN", "LINDEX", "LPOS", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SRANDMEMBER", "SSCAN",
		"ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZREVRANGE", "ZSCORE", "ZMSCORE",
		"ZRANK", "ZREVRANK", "ZCARD", "ZCOUNT", "ZLEXCOUNT", "ZRANDMEMBER", "ZSCAN", "XRANGE", "XREVRANGE", "XLEN", "XPENDING",
		"GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO", "GEOSEARCH")
	set(typedWrite, "HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY", "HINCRBYFLOAT", "HEXPIRE", "HPEXPIRE", "HPERSIST",
		"HGETDEL", "HGETEX", "HSETEX", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LSET", "LREM", "LTRIM", "LINSERT",
		"SADD", "SREM", "SPOP", "ZADD", "ZINCRBY", "ZREM", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX",
		"ZPOPMIN", "ZPOPMAX", "XADD", "XDEL", "XTRIM", "XACK", "XCLAIM", "XAUTOCLAIM", "XSETID", "GEOADD")
	set(Info{first: 1, Write: true, Typed: true, Blocking: true}, "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX")
	// Subcommand first: the key is the third word.
	set(Info{first: 2, ReadOnly: true}, "XINFO", "OBJECT", "MEMORY")
	set(Info{first: 2, Write: true}, "XGROUP")
	set(Info{first: 2, Write: true, keys: keysAll}, "BITOP") // BITOP op dest src...
	set(Info{first: 1, keys: keysAll, ReadOnly: true}, "MGET", "EXISTS", "SINTER", "SUNION", "SDIFF", "PFCOUNT")
	// TOUCH changes the keys' access time (OBJECT IDLETIME): Redis flags
	// it readonly, but its reply counts keys that exist now.
	set(Info{first: 1, keys: keysAll, ReadOnly: true, Nondeterministic: true}, "TOUCH")
	set(Info{first: 1, Write: true, keys: keysAll}, "DEL", "UNLINK", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE",
		"PFMERGE", "RENAME", "RENAMENX", "RPOPLPUSH")
	set(Info{first: 1, Write: true, keys: keysPairs}, "MSET", "MSETNX")
	set(Info{first: 1, keys: keysTwo, ReadOnly: true}, "LCS")
	set(Info{first: 1, Write: true, keys: keysTwo}, "SMOVE", "LMOVE", "COPY", "GEOSEARCHSTORE", "ZRANGESTORE")
	set(Info{first: 1, Write: true, keys: keysTwo, Blocking: true}, "BLMOVE", "BRPOPLPUSH")
	set(Info{first: keyMovable, Write: true, keys: keysNumkeys}, "LMPOP", "ZMPOP", "ZUNION", "ZINTER", "ZDIFF")
	set(Info{first: keyMovable, Write: true, keys: keysNumkeys, Blocking: true}, "BLMPOP", "BZMPOP")
	set(Info{first: keyMovable, Write: true, keys: keysNumkeys, Scripting: true}, "EVAL", "EVALSHA", "FCALL")
	set(Info{first: keyMovable, keys: keysNumkeys, Scripting: true, ReadOnly: true}, "EVAL_RO", "EVALSHA_RO", "FCALL_RO")
	set(Info{first: keyMovable, Typed: true, keys: keysNumkeys, ReadOnly: true}, "SINTERCARD") // SINTERCARD numkeys key...
	set(Info{first: 1, Write: true, keys: keysStore}, "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE")
	set(Info{first: keyMovable, ReadOnly: true}, "XREAD")
	set(Info{first: keyMovable, Write: true}, "XREADGROUP")

	// Keyless commands with one request and one reply.
	set(Info{}, "PING", "ECHO", "INFO", "TIME", "LASTSAVE", "COMMAND", "CONFIG", "PUBLISH",
		"SCRIPT", "FUNCTION", "LATENCY", "SLOWLOG", "LOLWUT", "ROLE")
	set(Info{Blocking: true}, "WAIT", "WAITAOF")
	// A shard channel is hashed like a key: SPUBLISH goes to its slot.
	set(Info{first: 1}, "SPUBLISH")
	// Connection state and transactions; WATCH names keys.
	set(Info{Kind: State}, "AUTH", "SELECT", "HELLO", "RESET")
	set(Info{Kind: Quit}, "QUIT")
	set(Info{Kind: Multi}, "MULTI")
	set(Info{Kind: EndTx}, "EXEC", "DISCARD")
	set(Info{Kind: Watch, first: 1, keys: keysAll}, "WATCH")
	set(Info{Kind: Unwatch}, "UNWATCH")
	set(Info{Kind: PubSub}, "SUBSCRIBE", "PSUBSCRIBE", "MONITOR")
	set(Info{Kind: Unsubscribe}, "UNSUBSCRIBE", "PUNSUBSCRIBE")
	// A shard channel is hashed like a key: SSUBSCRIBE goes to its slot.
	set(Info{Kind: PubSub, first: 1}, "SSUBSCRIBE")
	set(Info{Kind: Unsubscribe, first: 1}, "SUNSUBSCRIBE")
	set(Info{Kind: ClusterWide}, "KEYS", "SCAN", "DBSIZE", "RANDOMKEY", "FLUSHALL", "FLUSHDB", "SWAPDB")
	set(Info{Kind: Replication}, "SYNC", "PSYNC", "REPLCONF")

	// Reads whose reply may differ for the same request on the same value.
	for _, n := range []string{"SRANDMEMBER", "ZRANDMEMBER", "HRANDFIELD", "HSCAN", "SSCAN", "ZSCAN",
		"TTL", "PTTL", "HTTL", "HPTTL", "OBJECT", "MEMORY", "XINFO", "XPENDING"} {
		c := m[n]
		c.Nondeterministic = true
		m[n] = c
	}
	c := m["SORT_RO"]
	c.incomplete = true
	m["SORT_RO"] = c
	for name, c := range m {
		if (c.Kind == Plain && !c.Blocking && !c.Scripting) || c.Kind == ClusterWide {
			c.Shareable = true
			m[name] = c
		}
	}
	return m
}()

// Lookup finds a command by name, case-insensitively, without allocating.
// ok is false for a command the table does not know.
func Lookup(name []byte) (c Info, ok bool) {
	var up [24]byte
	if len(name) > len(up) {
		return Info{}, false
	}
	for i, b := range name {
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		up[i] = b
	}
	c, ok = table[string(up[:len(name)])]
	return c, ok
}

// ForEachKey calls f with the index in args (args[0] is the command name)
// of every key argument, in order, until f returns false. A command not
// known to name keys yields none; streams of XREAD/XREADGROUP after the
// first are not yielded.
func ForEachKey(args [][]byte, f func(i int) bool) {
	if len(args) == 0 {
		return
	}
	if c, ok := Lookup(args[0]); ok {
		c.ForEachKey(args, f)
	}
}

// ForEachKey calls f with the index of every key argument of this command
// in args, in order, until f returns false (see the package-level
// ForEachKey).
func (c Info) ForEachKey(args [][]byte, f func(i int) bool) {
	switch c.keys {
	case keysFirst:
		if c.first > 0 && int(c.first) < len(args) {
			f(int(c.first))
		} else if c.first == keyMovable { // XREAD, XREADGROUP: the first stream
			for i := 1; i+1 < len(args); i++ {
				if EqFold(args[i], "STREAMS") {
					f(i + 1)
					return
				}
			}
		}
	case keysAll, keysPairs, keysTwo:
		step, end := 1, len(args)
		if c.keys == keysPairs {
			step = 2
		}
		if c.keys == keysTwo && int(c.first)+2 < end {
			end = int(c.first) + 2
		}
		for i := int(c.first); i < end; i += step {
			if !f(i) {
				return
			}
		}
	case keysNumkeys, keysStore:
		at := 1 // where numkeys is
		switch {
		case c.keys == keysStore:
			if len(args) < 2 || !f(1) {
				return
			}
			at = 2
		case EqFold(args[0], "EVAL"), EqFold(args[0], "EVALSHA"), EqFold(args[0], "FCALL"), EqFold(args[0], "EVAL_RO"),
			EqFold(args[0], "EVALSHA_RO"), EqFold(args[0], "FCALL_RO"), EqFold(args[0], "BLMPOP"), EqFold(args[0], "BZMPOP"):
			at = 2
		}
		if at >= len(args) {
			return
		}
		n, err := strconv.Atoi(string(args[at]))
		if err != nil || n <= 0 {
			return
		}
		for i := at + 1; i <= at+n && i < len(args); i++ {
			if !f(i) {
				return
			}
		}
	}
}

// Cacheable reports whether this invocation's reply is a function of the
// request and the value of the one key it names, so that the engine may
// answer it for several clients (coalescing) and again later (the local
// cache) until that key is written: a read-only command (never a write,
// script, blocking form, transaction or connection command) whose output
// is deterministic, with a key spec that names every key it reads, naming
// exactly one key. By the table's flags, not by name: a command added to
// the table with those flags is cacheable.
func (c Info) Cacheable(args [][]byte) bool {
	if !c.ReadOnly || c.Write || c.Nondeterministic || c.incomplete || c.Scripting || c.Kind != Plain ||
		c.first <= 0 || c.IsBlocking(args) {
		return false
	}
	n := 0
	c.ForEachKey(args, func(int) bool { n++; return n < 2 })
	return n == 1
}

// FirstIndex is the index in args of the first key: 0 when the command
// names none, -1 when its position depends on other arguments.
func (c Info) FirstIndex() int { return int(c.first) }

// MultiKey reports whether the command may name keys beyond its first.
func (c Info) MultiKey() bool { return c.keys != keysFirst }

// FirstKey returns the command's first key, or nil if it names none. A
// fixed position costs an index; only movable keys (EVAL, XREAD, ...) walk
// args.
func (c Info) FirstKey(args [][]byte) []byte {
	switch {
	case c.first == 0:
		return nil
	case c.first > 0:
		if int(c.first) < len(args) {
			return args[c.first]
		}
		return nil
	}
	var key []byte
	c.ForEachKey(args, func(i int) bool { key = args[i]; return false })
	return key
}

// IsBlocking reports whether this invocation may block in Redis: a
// blocking command, or XREAD/XREADGROUP with a BLOCK option.
func (c Info) IsBlocking(args [][]byte) bool {
	if c.Blocking {
		return true
	}
	if c.first == keyMovable && c.keys == keysFirst && len(args) > 0 && (EqFold(args[0], "XREAD") || EqFold(args[0], "XREADGROUP")) {
		for _, a := range args[1:] {
			if EqFold(a, "BLOCK") {
				return true
			}
		}
	}
	return false
}

// EqFold reports whether b equals the upper-case ASCII s, ignoring case.
func EqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// Upper is name in upper case, for messages.
func Upper(name []byte) string { return string(bytes.ToUpper(name)) }

// Frames is how many frames Redis answers this invocation with on a
// connection that subscribed to nothing: one, except for the Unsubscribe
// commands (one per channel named, one when none is).
func (c Info) Frames(args [][]byte) int {
	if c.Kind == Unsubscribe && len(args) > 2 {
		return len(args) - 1
	}
	return 1
}

// IsFanout reports a command that a Redis Cluster client sends to every
// master: loading, flushing, deleting or killing scripts and functions
// (scripts and functions must be known where the keys are, and a running
// one is stopped on the node that runs it).
func IsFanout(args [][]byte) bool {
	if len(args) < 2 {
		return false
	}
	switch {
	case EqFold(args[0], "SCRIPT"):
		return EqFold(args[1], "LOAD") || EqFold(args[1], "FLUSH") || EqFold(args[1], "KILL") || EqFold(args[1], "EXISTS")
	case EqFold(args[0], "FUNCTION"):
		return EqFold(args[1], "LOAD") || EqFold(args[1], "DELETE") || EqFold(args[1], "FLUSH") || EqFold(args[1], "KILL") || EqFold(args[1], "RESTORE")
	}
	return false
}
