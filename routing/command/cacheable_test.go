package command_test

import (
	"testing"

	"github.com/heatsink-dev/heatsink/routing/command"
)

func args(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}

// TestCacheableByFlags: which reads the engine may share and cache is
// decided by the table's flags (ReadOnly, Nondeterministic, blocking,
// scripting, key specs), never by a list of names: the read-only one-key
// reads of every type are cacheable, random, cursor, remaining-time,
// blocking, script and multi-key reads and every write are not.
func TestCacheableByFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"GET", "k"}, true}, {[]string{"STRLEN", "k"}, true}, {[]string{"GETRANGE", "k", "0", "1"}, true},
		{[]string{"TYPE", "k"}, true}, {[]string{"EXISTS", "k"}, true}, {[]string{"EXPIRETIME", "k"}, true},
		{[]string{"HGET", "k", "f"}, true}, {[]string{"HGETALL", "k"}, true}, {[]string{"HMGET", "k", "a", "b"}, true},
		{[]string{"HEXISTS", "k", "f"}, true}, {[]string{"HLEN", "k"}, true},
		{[]string{"SISMEMBER", "k", "m"}, true}, {[]string{"SMISMEMBER", "k", "a", "b"}, true}, {[]string{"SMEMBERS", "k"}, true},
		{[]string{"SCARD", "k"}, true}, {[]string{"ZSCORE", "k", "m"}, true}, {[]string{"ZREVRANGE", "k", "0", "9", "WITHSCORES"}, true},
		{[]string{"ZRANGEBYSCORE", "k", "0", "10"}, true}, {[]string{"ZCARD", "k"}, true}, {[]string{"ZRANK", "k", "m"}, true},
		{[]string{"LRANGE", "k", "0", "-1"}, true}, {[]string{"LINDEX", "k", "0"}, true}, {[]string{"LLEN", "k"}, true},
		{[]string{"XRANGE", "k", "-", "+"}, true}, {[]string{"XLEN", "k"}, true}, {[]string{"GEOPOS", "k", "m"}, true},

		{[]string{"SRANDMEMBER", "k"}, false}, {[]string{"ZRANDMEMBER", "k"}, false}, {[]string{"HRANDFIELD", "k"}, false},
		{[]string{"HSCAN", "k", "0"}, false}, {[]string{"SSCAN", "k", "0"}, false}, {[]string{"ZSCAN", "k", "0"}, false},
		{[]string{"TTL", "k"}, false}, {[]string{"PTTL", "k"}, false}, {[]string{"OBJECT", "FREQ", "k"}, false},
		{[]string{"XPENDING", "k", "g"}, false}, {[]string{"XINFO", "STREAM", "k"}, false}, {[]string{"SORT_RO", "k", "BY", "w_*"}, false},
		{[]string{"BLPOP", "k", "0"}, false}, {[]string{"XREAD", "BLOCK", "0", "STREAMS", "k", "$"}, false},
		{[]string{"XREAD", "STREAMS", "k", "0"}, false}, {[]string{"EVAL_RO", "return 1", "1", "k"}, false},
		{[]string{"MGET", "k", "j"}, false}, {[]string{"SINTER", "k", "j"}, false}, {[]string{"EXISTS", "k", "j"}, false},
		{[]string{"SPUBLISH", "k", "m"}, false}, {[]string{"WATCH", "k"}, false},
		{[]string{"HSET", "k", "f", "v"}, false}, {[]string{"SADD", "k", "m"}, false}, {[]string{"ZINCRBY", "k", "1", "m"}, false},
	} {
		c, ok := command.Lookup([]byte(tc.args[0]))
		if !ok {
			t.Fatalf("%s not in the table", tc.args[0])
		}
		if got := c.Cacheable(args(tc.args...)); got != tc.want {
			t.Errorf("Cacheable(%v) = %v, want %v", tc.args, got, tc.want)
		}
	}
	// Nothing that may write, script or block is ever cacheable.
	for _, name := range command.Names() {
		c, _ := command.Lookup([]byte(name))
		a := command.Example(name, "k")
		if a != nil && c.Cacheable(a) && (c.Write || c.Scripting || c.Blocking || !c.ReadOnly) {
			t.Errorf("%s is cacheable but may write, script or block", name)
		}
	}
}
