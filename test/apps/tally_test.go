package apps

import (
	"bufio"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A workload's keys all contain its tag ("go:queue", "js:leaderboard",
// ...): the commands counted for it, at the client and at Redis, are the
// ones naming such a key.
var workloadNames = []string{"queue", "leaderboard", "stats", "flags", "product", "lua", "window"}

// tagOf is the tag of the first workload whose tag one of args contains
// ("" for none).
func tagOf(args []string) string {
	for _, a := range args {
		for _, lang := range []string{"go:", "js:"} {
			j := strings.Index(a, lang)
			if j < 0 {
				continue
			}
			for _, w := range workloadNames {
				if strings.HasPrefix(a[j+len(lang):], w) {
					return lang + w
				}
			}
		}
	}
	return ""
}

// counts are one side's commands per tag: calls, and at the client the
// error replies, refusals (a heatsink refusal or a SHED) apart.
type counts struct {
	mu      sync.Mutex
	calls   map[string]int64
	refused map[string]int64
	errs    map[string]int64
	lastErr map[string]string
}

func newCounts() *counts {
	return &counts{calls: map[string]int64{}, refused: map[string]int64{}, errs: map[string]int64{}, lastErr: map[string]string{}}
}

// refusal says whether a client's error reply is heatsink's: a command
// refused because of a mitigation or shed.
func refusal(msg string) bool {
	return strings.Contains(msg, "heatsink") || strings.HasPrefix(msg, "SHED") || strings.Contains(msg, " SHED ")
}

func (c *counts) add(tag string, err error) {
	if tag == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[tag]++
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.TxFailedErr) {
		return
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "NOSCRIPT") {
		return // EVALSHA before the script is loaded: the library's EVAL follows
	}
	if refusal(msg) {
		c.refused[tag]++
	} else {
		c.errs[tag]++
	}
	c.lastErr[tag] = msg
}

func (c *counts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// hook counts every command a go-redis client sends, by tag, with its
// reply's error.
type hook struct{ c *counts }

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.c.add(tagOf(argStrings(cmd)), cmd.Err())
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.c.add(tagOf(argStrings(cmd)), cmd.Err())
		}
		return err
	}
}

func argStrings(cmd redis.Cmder) []string {
	out := make([]string, 0, len(cmd.Args()))
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// monitor counts the commands each master receives from its clients (the
// sidecars), by tag and in all: MONITOR's lines, less those a script ran
// (its call is counted once, as the client's).
type monitor struct {
	mu       sync.Mutex
	byTag    map[string]int64
	byMaster []int64
}

func startMonitor(t *testing.T, addrs []string) *monitor {
	t.Helper()
	m := &monitor{byTag: map[string]int64{}, byMaster: make([]int64, len(addrs))}
	var wg sync.WaitGroup
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	})
	for i, a := range addrs {
		conn, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := bufio.NewReaderSize(conn, 1<<16)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				m.line(i, line)
			}
		}()
	}
	return m
}

// line counts one MONITOR line: +<time> [<db> <client>] "CMD" "arg"...
func (m *monitor) line(master int, line string) {
	open := strings.IndexByte(line, '[')
	shut := strings.IndexByte(line, ']')
	if open < 0 || shut < open || strings.Contains(line[open:shut], "lua") {
		return
	}
	args := quoted(line[shut+1:])
	if len(args) == 0 || strings.EqualFold(args[0], "monitor") {
		return
	}
	tag := tagOf(args[1:])
	m.mu.Lock()
	m.byMaster[master]++
	if tag != "" {
		m.byTag[tag]++
	}
	m.mu.Unlock()
}

// quoted splits MONITOR's "a" "b\"c" into its arguments (escapes kept
// but for \" and \\, enough to find a tag).
func quoted(s string) []string {
	var out []string
	var b strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case !in && c == '"':
			in = true
			b.Reset()
		case in && c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case in && c == '"':
			in = false
			out = append(out, b.String())
		case in:
			b.WriteByte(c)
		}
	}
	return out
}

func (m *monitor) snapshot() (map[string]int64, []int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tags := make(map[string]int64, len(m.byTag))
	for k, v := range m.byTag {
		tags[k] = v
	}
	return tags, slices.Clone(m.byMaster)
}

func sortStrings(s []string) []string { slices.Sort(s); return s }
