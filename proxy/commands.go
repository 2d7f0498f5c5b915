package proxy

import (
	"bytes"
	"strconv"
)

// kind says how the proxy treats a command beyond plain forwarding.
type kind uint8

const (
	kForward kind = iota
	// kSession changes connection state (AUTH, SELECT, HELLO, RESET): it is
	// remembered and replayed on every upstream connection the session opens
	// later, and in cluster mode sent to every node connection already open.
	kSession
	kQuit
	kMulti
	kEndTx // EXEC, DISCARD
	kWatch
	kUnwatch
	// kSubscribe turns the connection into a raw bidirectional pipe to one
	// upstream connection (pub/sub and MONITOR stream replies unasked).
	kSubscribe
	// kClusterWide acts on every node of a cluster: refused in cluster mode.
	kClusterWide
	// kRefuse breaks the request/reply framing a proxy relies on.
	kRefuse
)

// cmdInfo is what the proxy needs to know about a command.
type cmdInfo struct {
	kind kind
	// key is the index of the first key argument; 0 means keyless, keyMovable
	// means the position depends on other arguments (see firstKey).
	key      int8
	write    bool
	blocking bool
	// shareable commands leave no state on the connection, so they can go
	// through a multiplexed upstream connection.
	shareable bool
	// keys says where keys beyond the first are (forEachKey); only looked
	// at when the routing table is not empty.
	keys keySpec
	// typed commands act on a hash, list, set, sorted set or stream: never
	// on the string values the engine replicates, so on a replicated key
	// they are exact when forwarded raw (Redis answers WRONGTYPE if the
	// key holds a string).
	typed bool
}

// keySpec locates the keys of a multi-key command.
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

// commands lists the commands the proxy knows. A command not listed is
// forwarded as keyless (to the first node in cluster mode), which is right
// for administrative commands and gives a clear Redis error otherwise.
var commands = func() map[string]cmdInfo {
	m := map[string]cmdInfo{}
	set := func(info cmdInfo, names ...string) {
		for _, n := range names {
			m[n] = info
		}
	}
	read1 := cmdInfo{key: 1}
	write1 := cmdInfo{key: 1, write: true}
	set(read1, "GET", "GETRANGE", "STRLEN", "SUBSTR", "MGET", "EXISTS", "TYPE", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME",
		"HGET", "HMGET", "HGETALL", "HKEYS", "HVALS", "HLEN", "HEXISTS", "HSTRLEN", "HRANDFIELD", "HSCAN",
		"LRANGE", "LLEN", "LINDEX", "LPOS", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SRANDMEMBER", "SSCAN",
		"SINTER", "SUNION", "SDIFF", "SINTERCARD", "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX",
		"ZREVRANGE", "ZSCORE", "ZMSCORE", "ZRANK", "ZREVRANK", "ZCARD", "ZCOUNT", "ZLEXCOUNT", "ZRANDMEMBER", "ZSCAN",
		"GETBIT", "BITCOUNT", "BITPOS", "BITFIELD_RO", "PFCOUNT", "XRANGE", "XREVRANGE", "XLEN", "XPENDING", "XINFO",
		"GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO", "GEOSEARCH", "DUMP", "OBJECT", "TOUCH",
		"LCS", "SORT_RO", "MEMORY", "HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME")
	set(write1, "SET", "SETNX", "SETEX", "PSETEX", "GETSET", "GETDEL", "GETEX", "APPEND", "SETRANGE",
		"INCR", "DECR", "INCRBY", "DECRBY", "INCRBYFLOAT", "MSET", "MSETNX", "DEL", "UNLINK", "EXPIRE", "PEXPIRE", "EXPIREAT",
		"PEXPIREAT", "PERSIST", "RENAME", "RENAMENX", "COPY", "RESTORE", "SORT",
		"HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY", "HINCRBYFLOAT", "HEXPIRE", "HPEXPIRE", "HPERSIST", "HGETDEL", "HGETEX", "HSETEX",
		"LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LSET", "LREM", "LTRIM", "LINSERT", "LMOVE", "RPOPLPUSH",
		"SADD", "SREM", "SPOP", "SMOVE", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE",
		"ZADD", "ZINCRBY", "ZREM", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX", "ZPOPMIN", "ZPOPMAX",
		"ZRANGESTORE", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE",
		"SETBIT", "BITFIELD", "BITOP", "PFADD", "PFMERGE", "XADD", "XDEL", "XTRIM", "XACK", "XCLAIM", "XAUTOCLAIM",
		"XGROUP", "XSETID", "GEOADD", "GEORADIUS", "GEORADIUSBYMEMBER", "GEOSEARCHSTORE")
	// Subcommand-first commands whose key is the third word.
	set(cmdInfo{key: 2}, "XINFO", "OBJECT", "MEMORY")
	set(cmdInfo{key: 2, write: true}, "XGROUP", "BITOP")
	// Blocking commands: the upstream read has no deadline while one is
	// outstanding, because the client asked to wait.
	set(cmdInfo{key: 1, write: true, blocking: true}, "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BZPOPMIN", "BZPOPMAX")
	set(cmdInfo{key: keyMovable, write: true, blocking: true}, "BLMPOP", "BZMPOP")
	set(cmdInfo{key: keyMovable, write: true}, "EVAL", "EVALSHA", "FCALL", "LMPOP", "ZMPOP", "XREADGROUP", "ZUNION", "ZINTER", "ZDIFF")
	set(cmdInfo{key: keyMovable}, "EVAL_RO", "EVALSHA_RO", "FCALL_RO", "XREAD")
	set(cmdInfo{blocking: true}, "WAIT", "WAITAOF")
	set(cmdInfo{kind: kSession}, "AUTH", "SELECT", "HELLO", "RESET")
	set(cmdInfo{kind: kQuit}, "QUIT")
	set(cmdInfo{kind: kMulti}, "MULTI")
	set(cmdInfo{kind: kEndTx}, "EXEC", "DISCARD")
	set(cmdInfo{kind: kWatch, key: 1}, "WATCH")
	set(cmdInfo{kind: kUnwatch}, "UNWATCH")
	set(cmdInfo{kind: kSubscribe}, "SUBSCRIBE", "PSUBSCRIBE", "MONITOR")
	set(cmdInfo{kind: kSubscribe, key: 1}, "SSUBSCRIBE")
	set(cmdInfo{kind: kClusterWide}, "KEYS", "SCAN", "DBSIZE", "RANDOMKEY", "FLUSHALL", "FLUSHDB", "SWAPDB")
	set(cmdInfo{kind: kRefuse}, "SYNC", "PSYNC", "REPLCONF")
	set(cmdInfo{}, "PING", "ECHO", "INFO", "TIME", "LASTSAVE", "COMMAND", "CONFIG", "PUBLISH", "SPUBLISH",
		"SCRIPT", "FUNCTION", "LATENCY", "SLOWLOG", "LOLWUT", "ROLE")
	spec := func(k keySpec, names ...string) {
		for _, n := range names {
			info := m[n]
			info.keys = k
			m[n] = info
		}
	}
	spec(keysAll, "MGET", "EXISTS", "DEL", "UNLINK", "TOUCH", "WATCH", "SINTER", "SUNION", "SDIFF",
		"SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE", "PFCOUNT", "PFMERGE", "RENAME", "RENAMENX", "RPOPLPUSH",
		"BITOP")
	spec(keysPairs, "MSET", "MSETNX")
	spec(keysTwo, "SMOVE", "LMOVE", "BLMOVE", "BRPOPLPUSH", "COPY", "LCS", "GEOSEARCHSTORE", "ZRANGESTORE")
	spec(keysNumkeys, "EVAL", "EVALSHA", "FCALL", "EVAL_RO", "EVALSHA_RO", "FCALL_RO", "LMPOP", "ZMPOP", "BLMPOP", "BZMPOP",
		"ZUNION", "ZINTER", "ZDIFF")
	spec(keysStore, "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE")
	for _, n := range []string{"HGET", "HMGET", "HGETALL", "HKEYS", "HVALS", "HLEN", "HEXISTS", "HSTRLEN", "HRANDFIELD", "HSCAN",
		"LRANGE", "LLEN", "LINDEX", "LPOS", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SRANDMEMBER", "SSCAN",
		"ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZREVRANGE", "ZSCORE", "ZMSCORE",
		"ZRANK", "ZREVRANK", "ZCARD", "ZCOUNT", "ZLEXCOUNT", "ZRANDMEMBER", "ZSCAN", "XRANGE", "XREVRANGE", "XLEN", "XPENDING",
		"GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO", "GEOSEARCH", "HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME",
		"HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY", "HINCRBYFLOAT", "HEXPIRE", "HPEXPIRE", "HPERSIST", "HGETDEL", "HGETEX", "HSETEX",
		"LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LSET", "LREM", "LTRIM", "LINSERT",
		"SADD", "SREM", "SPOP", "ZADD", "ZINCRBY", "ZREM", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX", "ZPOPMIN", "ZPOPMAX",
		"XADD", "XDEL", "XTRIM", "XACK", "XCLAIM", "XAUTOCLAIM", "XSETID", "GEOADD", "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"} {
		info := m[n]
		info.typed = true
		m[n] = info
	}
	for name, info := range m {
		if info.kind == kForward && !info.blocking || info.kind == kClusterWide {
			info.shareable = true
			m[name] = info
		}
	}
	return m
}()

// lookupCommand finds a command by name, case-insensitively, without
// allocating.
func lookupCommand(name []byte) (cmdInfo, bool) {
	var up [24]byte
	if len(name) > len(up) {
		return cmdInfo{}, false
	}
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
	}
	info, ok := commands[string(up[:len(name)])]
	return info, ok
}

// firstKey returns the first key of a command, or nil if it has none.
func firstKey(info cmdInfo, args [][]byte) []byte {
	switch {
	case info.key == 0:
		return nil
	case info.key > 0:
		if int(info.key) < len(args) {
			return args[info.key]
		}
		return nil
	}
	name := args[0]
	switch {
	case eqFold(name, "XREAD"), eqFold(name, "XREADGROUP"):
		for i := 1; i+1 < len(args); i++ {
			if eqFold(args[i], "STREAMS") {
				return args[i+1]
			}
		}
		return nil
	case eqFold(name, "BLMPOP"), eqFold(name, "BZMPOP"):
		return numkeysKey(args, 2) // BLMPOP timeout numkeys key ...
	default: // EVAL script numkeys key..., LMPOP numkeys key..., ZUNION numkeys key...
		if eqFold(name, "LMPOP") || eqFold(name, "ZMPOP") || eqFold(name, "ZUNION") || eqFold(name, "ZINTER") || eqFold(name, "ZDIFF") {
			return numkeysKey(args, 1)
		}
		return numkeysKey(args, 2)
	}
}

// numkeysKey returns the first key after a numkeys argument at index i.
func numkeysKey(args [][]byte, i int) []byte {
	if i+1 >= len(args) || len(args[i]) == 0 || args[i][0] == '0' || args[i][0] == '-' {
		return nil
	}
	return args[i+1]
}

func eqFold(b []byte, s string) bool { return len(b) == len(s) && bytes.EqualFold(b, []byte(s)) }

// isBlocking reports whether this invocation may block in Redis. XREAD and
// XREADGROUP block only with a BLOCK option.
func isBlocking(info cmdInfo, args [][]byte) bool {
	if info.blocking {
		return true
	}
	if info.key == keyMovable && (eqFold(args[0], "XREAD") || eqFold(args[0], "XREADGROUP")) {
		for _, a := range args[1:] {
			if eqFold(a, "BLOCK") {
				return true
			}
		}
	}
	return false
}

// forEachKey calls f with the index of every key argument of a command,
// in order, until f returns false. Commands whose other keys it does not
// know yield their first key only.
func forEachKey(info cmdInfo, args [][]byte, f func(i int) bool) {
	switch info.keys {
	case keysFirst:
		if info.key > 0 && int(info.key) < len(args) {
			f(int(info.key))
		} else if info.key == keyMovable { // XREAD, XREADGROUP: the first stream
			for i := 1; i+1 < len(args); i++ {
				if eqFold(args[i], "STREAMS") {
					f(i + 1)
					return
				}
			}
		}
	case keysAll, keysPairs, keysTwo:
		step, end := 1, len(args)
		if info.keys == keysPairs {
			step = 2
		}
		if info.keys == keysTwo && int(info.key)+2 < end {
			end = int(info.key) + 2
		}
		for i := int(info.key); i < end; i += step {
			if !f(i) {
				return
			}
		}
	case keysNumkeys, keysStore:
		at := 1 // numkeys position
		switch {
		case info.keys == keysStore:
			if len(args) < 2 || !f(1) {
				return
			}
			at = 2
		case eqFold(args[0], "EVAL"), eqFold(args[0], "EVALSHA"), eqFold(args[0], "FCALL"), eqFold(args[0], "EVAL_RO"),
			eqFold(args[0], "EVALSHA_RO"), eqFold(args[0], "FCALL_RO"), eqFold(args[0], "BLMPOP"), eqFold(args[0], "BZMPOP"):
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
