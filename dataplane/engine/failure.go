package engine

import (
	"bytes"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

// Failure reports whether an error the engine answered a command with is a
// failure of the command's path rather than Redis' answer to the command
// itself: the manager withdraws a move whose path fails clearly more than
// direct traffic (docs/engine.md, "A move whose path fails is undone"), so
// an error the unmitigated key would have got too (WRONGTYPE, "ERR value is
// not an integer", a move's own refusal) must not count.
//
// An error in Redis' form (an upper-case code first: Redis' reply, or the
// engine's own stand-in for one) fails by its code (FailureCode); any
// other is the client library's or the network's (an i/o error, a
// timeout, a connection pool exhausted, the engine's connection lost):
// the command never got Redis' answer, a failure.
func Failure(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, redis.Nil): // go-redis' nil reply, an answer
		return false
	case errors.Is(err, errNoReplica):
		return true
	}
	msg := err.Error()
	if code := replyCode(msg); code != "" {
		return FailureCode([]byte(code))
	}
	return true
}

// FailureCode reports whether an error reply's code (its first word, or
// the whole line) says that the node could not serve the command, whatever
// it was: loading its data set, a replica without its master, a cluster
// down or resharding, a write on a replica after a failover, a node busy
// in a script, out of memory, unable to persist, an unfollowed
// redirection. Every other code is an answer to the command.
func FailureCode(line []byte) bool {
	code := line
	if i := bytes.IndexByte(line, ' '); i >= 0 {
		code = line[:i]
	}
	switch string(code) {
	case "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY", "NOREPLICAS", "MISCONF", "OOM", "MOVED", "ASK":
		return true
	}
	return false
}

// replyCode is the code of an error message in Redis' form (its first
// word, upper-case letters only, then a space and the text), or "" (a Go
// error such as io.EOF's "EOF" has no text after it).
func replyCode(msg string) string {
	i := 0
	for i < len(msg) && msg[i] >= 'A' && msg[i] <= 'Z' {
		i++
	}
	if i == 0 || i >= len(msg) || msg[i] != ' ' {
		return ""
	}
	return msg[:i]
}

// NotSent reports whether err says the command never left this process:
// the dial of its connection failed (the sidecar's dialer refuses an
// address whose last dial just failed the same way), or no pooled
// connection was free in time. Such a command may go elsewhere, or again,
// without risk of being applied twice.
func NotSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}

// notApplied reports whether err proves Redis did not run the command on
// its path: it was never sent (NotSent), or the node answered that it
// could not serve it (FailureCode: loading, a cluster down, a replica, a
// redirection go-redis did not follow...). A split counter's write that
// failed so is made at another of its places (IncrBy).
func notApplied(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return FailureCode([]byte(re.Error()))
	}
	return NotSent(err)
}
