package command

// examples are well-formed invocations of the commands whose key is not
// simply their second word, or whose form the engine serves only with the
// right arguments; "K" stands for the key. Every other command's example
// is NAME K 1 2.
var examples = map[string][]string{
	"GET": {"K"}, "MGET": {"K"}, "STRLEN": {"K"}, "TYPE": {"K"}, "EXISTS": {"K"}, "DEL": {"K"}, "UNLINK": {"K"},
	"SET": {"K", "v"}, "SETNX": {"K", "v"}, "SETEX": {"K", "10", "v"}, "PSETEX": {"K", "10", "v"}, "MSET": {"K", "v"},
	"INCR": {"K"}, "DECR": {"K"}, "INCRBY": {"K", "2"}, "DECRBY": {"K", "2"}, "GETEX": {"K", "PERSIST"},
	"EVAL": {"return 1", "1", "K"}, "EVALSHA": {"e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "K"},
	"FCALL": {"f", "1", "K"}, "EVAL_RO": {"return 1", "1", "K"}, "EVALSHA_RO": {"e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "K"},
	"FCALL_RO": {"f", "1", "K"},
	"LMPOP":    {"1", "K", "LEFT"}, "BLMPOP": {"0", "1", "K", "LEFT"}, "ZMPOP": {"1", "K", "MIN"}, "BZMPOP": {"0", "1", "K", "MIN"},
	"ZUNION": {"1", "K"}, "ZINTER": {"1", "K"}, "ZDIFF": {"1", "K"}, "SINTERCARD": {"1", "K"},
	"ZUNIONSTORE": {"K", "1", "K"}, "ZINTERSTORE": {"K", "1", "K"}, "ZDIFFSTORE": {"K", "1", "K"},
	"XREAD": {"STREAMS", "K", "0"}, "XREADGROUP": {"GROUP", "g", "c", "STREAMS", "K", ">"},
	"XINFO": {"STREAM", "K"}, "XGROUP": {"CREATE", "K", "g", "$"}, "OBJECT": {"ENCODING", "K"}, "MEMORY": {"USAGE", "K"},
	"BITOP": {"AND", "K", "K"},
	"TTL":   {"K"}, "PTTL": {"K"}, "EXPIRETIME": {"K"}, "PEXPIRETIME": {"K"}, "PERSIST": {"K"},
	"EXPIRE": {"K", "10"}, "PEXPIRE": {"K", "10000"}, "EXPIREAT": {"K", "4102444800"}, "PEXPIREAT": {"K", "4102444800000"},
}

// Example is a well-formed invocation of the command name naming key, or
// nil when the command names no key: for tests that walk the whole table
// (the engine's served families, the manager's property test).
func Example(name, key string) [][]byte {
	c, ok := table[name]
	if !ok || c.first == 0 {
		return nil
	}
	rest, ok := examples[name]
	if !ok {
		rest = []string{"K", "1", "2"}
	}
	out := [][]byte{[]byte(name)}
	for _, a := range rest {
		if a == "K" {
			a = key
		}
		out = append(out, []byte(a))
	}
	return out
}
