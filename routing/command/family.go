package command

import (
	"fmt"

	"github.com/heatsink-dev/heatsink/routing"
)

// familyOf lists the commands of each family (routing.Families) but
// FamOther, which every other command of the table gets: each command has
// exactly one (TestEveryCommandHasOneFamily). The manager chooses a key's
// moves by the families its clients send (routing.Served...), so a command
// listed in the wrong family could make it choose a move that refuses it;
// the engine's Classify is tested against this grouping command by command.
var familyOf = map[routing.Families][]string{
	routing.FamStringRead:  {"GET", "MGET", "STRLEN"},
	routing.FamStringWrite: {"SET", "SETNX", "SETEX", "PSETEX", "MSET"},
	routing.FamCounter:     {"INCR", "DECR", "INCRBY", "DECRBY"},
	routing.FamKey:         {"DEL", "UNLINK", "EXISTS", "TYPE"},
	routing.FamHashRead:    {"HGET", "HMGET", "HGETALL", "HKEYS", "HVALS", "HLEN", "HEXISTS", "HSTRLEN"},
	routing.FamHashOther:   {"HINCRBYFLOAT", "HRANDFIELD", "HSCAN", "HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME"},
	routing.FamHashWrite:   {"HSET", "HSETNX", "HMSET", "HEXPIRE", "HPEXPIRE", "HPERSIST", "HGETDEL", "HGETEX", "HSETEX"},
	routing.FamHashCounter: {"HINCRBY", "HDEL"},
	routing.FamSetRead:     {"SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD"},
	routing.FamSetWrite:    {"SADD", "SREM"},
	routing.FamSetOther: {"SPOP", "SMOVE", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE",
		"SRANDMEMBER", "SSCAN", "SINTER", "SUNION", "SDIFF", "SINTERCARD"},
	routing.FamZSetRead:  {"ZRANGE", "ZREVRANGE", "ZSCORE", "ZMSCORE", "ZRANK", "ZREVRANK", "ZCARD"},
	routing.FamZSetWrite: {"ZINCRBY", "ZREM"},
	routing.FamZSetOther: {"ZADD", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX",
		"ZCOUNT", "ZLEXCOUNT", "ZRANDMEMBER", "ZSCAN", "ZUNION", "ZINTER", "ZDIFF",
		"ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX", "ZPOPMIN", "ZPOPMAX",
		"BZPOPMIN", "BZPOPMAX", "ZMPOP", "BZMPOP", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZRANGESTORE",
		"GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO", "GEOSEARCH",
		"GEOADD", "GEORADIUS", "GEORADIUSBYMEMBER", "GEOSEARCHSTORE"},
	routing.FamOrdered: {"LRANGE", "LLEN", "LINDEX", "LPOS", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LSET", "LREM",
		"LTRIM", "LINSERT", "BLPOP", "BRPOP", "LMPOP", "BLMPOP", "LMOVE", "BLMOVE", "RPOPLPUSH", "BRPOPLPUSH",
		"XRANGE", "XREVRANGE", "XLEN", "XPENDING", "XADD", "XDEL", "XTRIM", "XACK", "XCLAIM", "XAUTOCLAIM", "XSETID",
		"XINFO", "XGROUP", "XREAD", "XREADGROUP"},
	routing.FamScript: {"EVAL", "EVALSHA", "FCALL", "EVAL_RO", "EVALSHA_RO", "FCALL_RO"},
	routing.FamTTL:    {"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "PERSIST"},
}

// assignFamilies sets every table entry's family; a name listed above but
// missing from the table is a programming error caught at start.
var familiesAssigned = func() bool {
	for name, c := range table {
		c.family = routing.FamOther
		table[name] = c
	}
	for f, names := range familyOf {
		for _, n := range names {
			c, ok := table[n]
			if !ok {
				panic(fmt.Sprintf("command: family of %s, which the table does not know", n))
			}
			c.family = f
			table[n] = c
		}
	}
	return true
}()

// FamilyOf is the family of this invocation (args[0] is the name): the
// command's, except where options change what the engine can serve: SET
// with GET reads the old value (FamOther), GETEX without options is a GET
// (FamStringRead; with options it reads and sets the expiry at once, which
// a split counter cannot: FamOther), ZADD INCR of one member is a ZINCRBY
// (FamZSetWrite), ZRANGE by score or lex or with LIMIT is FamZSetOther.
func (c Info) FamilyOf(args [][]byte) routing.Families {
	switch {
	case c.family == routing.FamStringWrite && len(args) > 3 && EqFold(args[0], "SET"):
		for _, a := range args[3:] {
			if EqFold(a, "GET") {
				return routing.FamOther
			}
		}
	case c.family == routing.FamOther && len(args) == 2 && EqFold(args[0], "GETEX"):
		return routing.FamStringRead
	case c.family == routing.FamZSetOther && IsZAddIncr(args):
		return routing.FamZSetWrite
	case c.family == routing.FamZSetRead && EqFold(args[0], "ZRANGE") && !ZRangeByRank(args):
		return routing.FamZSetOther
	}
	return c.family
}

// IsZAddIncr reports whether args is ZADD key INCR increment member: a
// ZINCRBY (a sorted set split by member serves it; ZADD's other forms set a
// score, which it cannot do exactly, or take flags it does not implement).
func IsZAddIncr(args [][]byte) bool {
	return len(args) == 5 && EqFold(args[0], "ZADD") && EqFold(args[2], "INCR")
}

// ZRangeByRank reports whether args is ZRANGE key start stop [REV]
// [WITHSCORES] (options in any order, each at most once): a range by rank,
// which a sorted set split by member merges exactly. BYSCORE, BYLEX and
// LIMIT are ranges it does not implement.
func ZRangeByRank(args [][]byte) bool {
	var rev, with bool
	for _, a := range args[min(4, len(args)):] {
		switch {
		case EqFold(a, "REV") && !rev:
			rev = true
		case EqFold(a, "WITHSCORES") && !with:
			with = true
		default:
			return false
		}
	}
	return len(args) >= 4
}

// KeyFamilies calls report for each key the invocation names, with the
// family its clients send it under: FamilyOf, plus FamTx inside MULTI.
// The proxy and the go-redis hook report these before the engine may
// refuse or shed the command, so that the manager learns what the key's
// clients need whatever happens to it.
func (c Info) KeyFamilies(args [][]byte, inTx bool, report func(key []byte, f routing.Families)) {
	f := c.FamilyOf(args)
	if inTx {
		f |= routing.FamTx
	}
	c.ForEachKey(args, func(i int) bool {
		report(args[i], f)
		return true
	})
}

// Family is the command's family whatever its options (see FamilyOf).
func (c Info) Family() routing.Families { return c.family }

// Names lists every command of the table, in no order: for tests that walk
// the whole table.
func Names() []string {
	out := make([]string, 0, len(table))
	for n := range table {
		out = append(out, n)
	}
	return out
}
