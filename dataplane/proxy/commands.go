package proxy

import (
	"bytes"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
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

// cmdInfo is what the proxy needs to know about a command. Where its keys
// are, and whether it writes, come from the engine's table (engine.Command),
// so the proxy and the engine's classification never disagree; the proxy
// adds only how the command uses its connection.
type cmdInfo struct {
	engine.Command
	kind     kind
	blocking bool
	// shareable commands leave no state on the connection, so they can go
	// through a multiplexed upstream connection.
	shareable bool
}

// commands lists the commands the proxy knows: every keyed command of the
// engine's table, plus the keyless ones with a kind of their own. A command
// not listed is forwarded as keyless (to the first node in cluster mode),
// which is right for administrative commands and gives a clear Redis error
// otherwise.
var commands = func() map[string]cmdInfo {
	m := map[string]cmdInfo{}
	for n, c := range engine.Commands() {
		m[n] = cmdInfo{Command: c}
	}
	// set gives names a kind and flags, keeping their key positions.
	set := func(info cmdInfo, names ...string) {
		for _, n := range names {
			info.Command = m[n].Command
			m[n] = info
		}
	}
	// Blocking commands: the upstream read has no deadline while one is
	// outstanding, because the client asked to wait.
	set(cmdInfo{blocking: true}, "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BZPOPMIN", "BZPOPMAX", "BLMPOP", "BZMPOP",
		"WAIT", "WAITAOF")
	set(cmdInfo{kind: kSession}, "AUTH", "SELECT", "HELLO", "RESET")
	set(cmdInfo{kind: kQuit}, "QUIT")
	set(cmdInfo{kind: kMulti}, "MULTI")
	set(cmdInfo{kind: kEndTx}, "EXEC", "DISCARD")
	set(cmdInfo{kind: kWatch}, "WATCH")
	set(cmdInfo{kind: kUnwatch}, "UNWATCH")
	set(cmdInfo{kind: kSubscribe}, "SUBSCRIBE", "PSUBSCRIBE", "MONITOR")
	// A shard channel is hashed like a key: SSUBSCRIBE goes to its slot.
	m["SSUBSCRIBE"] = cmdInfo{kind: kSubscribe, Command: engine.KeyAt(1)}
	set(cmdInfo{kind: kClusterWide}, "KEYS", "SCAN", "DBSIZE", "RANDOMKEY", "FLUSHALL", "FLUSHDB", "SWAPDB")
	set(cmdInfo{kind: kRefuse}, "SYNC", "PSYNC", "REPLCONF")
	set(cmdInfo{}, "PING", "ECHO", "INFO", "TIME", "LASTSAVE", "COMMAND", "CONFIG", "PUBLISH", "SPUBLISH",
		"SCRIPT", "FUNCTION", "LATENCY", "SLOWLOG", "LOLWUT", "ROLE")
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

func eqFold(b []byte, s string) bool { return len(b) == len(s) && bytes.EqualFold(b, []byte(s)) }

// isBlocking reports whether this invocation may block in Redis. XREAD and
// XREADGROUP block only with a BLOCK option.
func isBlocking(info cmdInfo, args [][]byte) bool {
	if info.blocking {
		return true
	}
	if info.FirstIndex() < 0 && (eqFold(args[0], "XREAD") || eqFold(args[0], "XREADGROUP")) {
		for _, a := range args[1:] {
			if eqFold(a, "BLOCK") {
				return true
			}
		}
	}
	return false
}
