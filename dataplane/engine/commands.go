package engine

import (
	"bytes"
	"strconv"
)

// Command is what Classify needs to know about a Redis command: where its
// keys are, whether it writes, and whether it only acts on a non-string
// type. It lives here, not in the proxy, so that the proxy and the go-redis
// hook decide the same way for the same command.
type Command struct {
	// Write: the command may change a key. A raw write on a mitigated key
	// must drop the key's cached copy.
	Write bool
	// Typed: the command acts on a hash, list, set, sorted set or stream,
	// never on the string values the engine replicates, so on a replicated
	// key it is exact when sent raw (Redis answers WRONGTYPE if the key
	// holds a string).
	Typed bool
	// first is the index of the first key; 0 means keyless, keyMovable
	// that the position depends on other arguments.
	first int8
	keys  keySpec
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

// commands lists the keyed commands. A command not listed names no key:
// Classify lets it through.
var commands = func() map[string]Command {
	m := map[string]Command{}
	set := func(c Command, names ...string) {
		for _, n := range names {
			m[n] = c
		}
	}
	read, write := Command{first: 1}, Command{first: 1, Write: true}
	typedRead, typedWrite := Command{first: 1, Typed: true}, Command{first: 1, Write: true, Typed: true}
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
		"ZPOPMIN", "ZPOPMAX", "XADD", "XDEL", "XTRIM", "XACK", "XCLAIM", "XAUTOCLAIM", "XSETID", "GEOADD",
		"BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX")
	// Subcommand first: the key is the third word.
	set(Command{first: 2}, "XINFO", "OBJECT", "MEMORY")
	set(Command{first: 2, Write: true}, "XGROUP")
	set(Command{first: 2, Write: true, keys: keysAll}, "BITOP") // BITOP op dest src...
	set(Command{first: 1, keys: keysAll}, "MGET", "EXISTS", "TOUCH", "WATCH", "SINTER", "SUNION", "SDIFF", "PFCOUNT")
	set(Command{first: 1, Write: true, keys: keysAll}, "DEL", "UNLINK", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE",
		"PFMERGE", "RENAME", "RENAMENX", "RPOPLPUSH")
	set(Command{first: 1, Write: true, keys: keysPairs}, "MSET", "MSETNX")
	set(Command{first: 1, keys: keysTwo}, "LCS")
	set(Command{first: 1, Write: true, keys: keysTwo}, "SMOVE", "LMOVE", "BLMOVE", "BRPOPLPUSH", "COPY",
		"GEOSEARCHSTORE", "ZRANGESTORE")
	set(Command{first: keyMovable, Write: true, keys: keysNumkeys}, "EVAL", "EVALSHA", "FCALL", "LMPOP", "ZMPOP",
		"BLMPOP", "BZMPOP", "ZUNION", "ZINTER", "ZDIFF")
	set(Command{first: keyMovable, keys: keysNumkeys}, "EVAL_RO", "EVALSHA_RO", "FCALL_RO")
	set(Command{first: keyMovable, Typed: true, keys: keysNumkeys}, "SINTERCARD") // SINTERCARD numkeys key...
	set(Command{first: 1, Write: true, keys: keysStore}, "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE")
	set(Command{first: keyMovable}, "XREAD")
	set(Command{first: keyMovable, Write: true}, "XREADGROUP")
	return m
}()

// LookupCommand finds a command by name, case-insensitively, without
// allocating. ok is false for a command that names no key.
func LookupCommand(name []byte) (c Command, ok bool) {
	var up [24]byte
	if len(name) > len(up) {
		return Command{}, false
	}
	for i, b := range name {
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		up[i] = b
	}
	c, ok = commands[string(up[:len(name)])]
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
	c, ok := LookupCommand(args[0])
	if !ok {
		return
	}
	c.forEachKey(args, f)
}

func (c Command) forEachKey(args [][]byte, f func(i int) bool) {
	switch c.keys {
	case keysFirst:
		if c.first > 0 && int(c.first) < len(args) {
			f(int(c.first))
		} else if c.first == keyMovable { // XREAD, XREADGROUP: the first stream
			for i := 1; i+1 < len(args); i++ {
				if eqFold(args[i], "STREAMS") {
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

func eqFold(b []byte, s string) bool { return len(b) == len(s) && bytes.EqualFold(b, []byte(s)) }

// Commands returns a copy of the keyed-command table, for a caller that
// builds its own table on top of it: the proxy adds how each command uses
// its connection, and takes key positions from here so both agree.
func Commands() map[string]Command {
	out := make(map[string]Command, len(commands))
	for n, c := range commands {
		out[n] = c
	}
	return out
}

// KeyAt is the shape of a read command whose key is argument i. It is for
// routing commands that are not in the table by a key-like argument (the
// proxy sends SSUBSCRIBE to its shard channel's slot); Classify never sees
// it.
func KeyAt(i int) Command { return Command{first: int8(i)} }

// FirstIndex is the index in args of the first key: 0 when the command names
// none, -1 when its position depends on other arguments.
func (c Command) FirstIndex() int { return int(c.first) }

// MultiKey reports whether the command may name keys beyond its first.
func (c Command) MultiKey() bool { return c.keys != keysFirst }

// FirstKey returns the command's first key, or nil if it names none. A fixed
// position costs an index; only movable keys (EVAL, XREAD, ...) walk args.
func (c Command) FirstKey(args [][]byte) []byte {
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
	c.forEachKey(args, func(i int) bool { key = args[i]; return false })
	return key
}

// ForEachKey calls f with the index of every key argument of this command in
// args, in order, until f returns false (see the package-level ForEachKey).
func (c Command) ForEachKey(args [][]byte, f func(i int) bool) { c.forEachKey(args, f) }
