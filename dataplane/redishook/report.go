package redishook

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// report tells the observer about cmd's access, as the sidecar reports a
// command it forwards (dataplane/proxy), and its outcome to one that takes
// outcomes (any command sent raw): nothing more for a command without a
// key; for its first key, a write with the request's RESP size when the
// command may write, else a read with its reply's RESP size.
func (h *Hook) report(cmd redis.Cmder) {
	if h.obs == nil {
		return
	}
	args := cmd.Args()
	var name string
	if len(args) > 0 {
		name, _ = args[0].(string)
	}
	info, known := command.Lookup([]byte(name))
	if oo, ok := h.obs.(outcomeObserver); ok {
		// Sent raw: the baseline a move's failures are judged by, its
		// reads (of a key) apart, as the proxy's.
		read := known && !info.Write && len(args) >= 2 && info.FirstIndex() != 0
		oo.ObserveRaw(h.policy, read, engine.Failure(cmd.Err()))
	}
	if len(args) < 2 || !known {
		return
	}
	var key string
	switch i := info.FirstIndex(); {
	case i == 0:
		return
	case i > 0:
		if i >= len(args) {
			return
		}
		b, err := bytesOf(args[i])
		if err != nil {
			return
		}
		key = string(b)
	default: // a key whose position depends on other arguments
		wa := wireArgs(cmd)
		k := info.FirstKey(wa)
		if k == nil {
			return
		}
		key = string(k)
	}
	if info.Write {
		h.obs.Observe(h.policy, key, 0, 1, uint32(requestSize(args)))
		return
	}
	h.obs.Observe(h.policy, key, 1, 0, uint32(replySize(cmd)))
}

func (h *Hook) reportAll(cmds []redis.Cmder) {
	if h.obs == nil {
		return
	}
	for _, c := range cmds {
		h.report(c)
	}
}

// outcomeObserver is an Observer also told the outcome of each command a
// move served and of each sent raw (dataplane/counts.Client is), as the
// sidecar proxy's OutcomeObserver.
type outcomeObserver interface {
	ObserveMoved(policy, key string, read, failed bool)
	ObserveRaw(policy string, read, failed bool)
}

// observeMoved reports a command (args) on key the engine served by its
// move, read when it writes nothing, failed when its error is a failure
// of the move's path (engine.Failure).
func (h *Hook) observeMoved(key string, args [][]byte, r engine.Reply) {
	oo, ok := h.obs.(outcomeObserver)
	if !ok {
		return
	}
	var err error
	if r.Kind == engine.ReplyError {
		err = r.Err
	}
	read := false
	if len(args) > 0 {
		info, ok := command.Lookup(args[0])
		read = ok && !info.Write
	}
	oo.ObserveMoved(h.policy, key, read, engine.Failure(err))
}

// requestSize is the size of args as a RESP array of bulk strings, what
// the sidecar counts for a write.
func requestSize(args []any) int {
	n := 1 + digits(len(args)) + 2
	for _, a := range args {
		b, _ := bytesOf(a)
		n += bulkSize(len(b))
	}
	return n
}

// replySize is the size of cmd's reply as RESP, from what go-redis decoded,
// what the sidecar counts for a read (exact for strings, integers and
// their arrays; an error counts its text).
func replySize(cmd redis.Cmder) int {
	if err := cmd.Err(); err != nil {
		if err == redis.Nil {
			return 5 // $-1
		}
		return len(err.Error()) + 3
	}
	switch c := cmd.(type) {
	case *redis.StringCmd:
		return bulkSize(len(c.Val()))
	case *redis.IntCmd:
		return 1 + len(strconv.FormatInt(c.Val(), 10)) + 2
	case *redis.StatusCmd:
		return len(c.Val()) + 3
	case *redis.StringSliceCmd:
		n := 1 + digits(len(c.Val())) + 2
		for _, v := range c.Val() {
			n += bulkSize(len(v))
		}
		return n
	case *redis.SliceCmd:
		return valueSize(c.Val())
	case *redis.MapStringStringCmd:
		n := 1 + digits(len(c.Val())*2) + 2
		for k, v := range c.Val() {
			n += bulkSize(len(k)) + bulkSize(len(v))
		}
		return n
	case *redis.Cmd:
		return valueSize(c.Val())
	}
	return 0
}

func valueSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 5
	case string:
		return bulkSize(len(v))
	case int64:
		return 1 + len(strconv.FormatInt(v, 10)) + 2
	case []any:
		n := 1 + digits(len(v)) + 2
		for _, e := range v {
			n += valueSize(e)
		}
		return n
	}
	return 0
}

func bulkSize(n int) int { return 1 + digits(n) + 2 + n + 2 }

func digits(n int) int { return len(strconv.Itoa(n)) }
