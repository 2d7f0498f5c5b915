// Package transparency is the sidecar's differential transparency suite:
// every scenario is played against Redis directly and through the proxy
// (event loop and sessions; standalone and a 3-master cluster; RESP2 and
// RESP3), and the bytes each client receives, and what clients see of each
// other, must be the same. A scenario drives several raw RESP clients step
// by step; steps that must happen in order across clients wait on Redis
// itself (a client counted as blocked), never on time.
package transparency

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// step is one action of one client. A client connects on its first step.
type step struct {
	c string // client name
	// One of: a command (args, "${name}" replaced by a saved value), a
	// pipeline of commands sent in one write, or raw bytes.
	cmd  []string
	cmds [][]string
	raw  string
	// read is the number of frames to read after writing (default: one
	// per command written; 0 with raw). noRead reads nothing now (the
	// replies of a blocking command come later, read by a later step with
	// only read set). untilClose reads every frame until the server
	// closes the connection.
	read       int
	noRead     bool
	untilClose bool
	// blocked waits, after the write, until Redis counts that many
	// clients blocked (INFO clients, summed over the nodes); unblocked
	// waits until it counts none.
	blocked   int
	unblocked bool
	// busy waits, after the write, until Redis answers BUSY (a script has
	// run longer than busy-reply-threshold).
	busy bool
	// mask normalises the frames read (values that legitimately differ
	// between two servers or connections, like a connection id).
	mask func(frame string) string
	// save keeps the first frame's value (an integer or a bulk string)
	// under this name, for later "${name}".
	save string
	// close closes the client's connection (after the write, if any).
	close bool
}

// scenario is a script of steps. standaloneOnly scenarios use what a
// cluster does not have (SELECT, node-wide commands through the proxy,
// keys of several slots in one command).
type scenario struct {
	name           string
	standaloneOnly bool
	clusterOnly    bool
	// proto is played as given: skip the RESP3 variant (its frames are the
	// point of the scenario).
	fixedProto bool
	// setup runs on every node before the scenario (CONFIG SET, ...).
	setup [][]string
	steps []step
}

// target is one way of reaching Redis.
type target struct {
	name string
	// addr is what clients connect to.
	addr string
	// nodes are the Redis servers behind it (one standalone, or every
	// master): for flushing between scenarios and counting blocked clients.
	nodes []*redis.Client
}

// transcript is what each client received, frame by frame.
type transcript map[string][]string

// play runs sc against tg and returns every client's frames.
func play(t *testing.T, tg target, sc scenario, proto int) transcript {
	t.Helper()
	ctx := context.Background()
	for _, n := range tg.nodes {
		reset(t, n)
		for _, s := range sc.setup {
			args := make([]any, len(s))
			for i, a := range s {
				args[i] = a
			}
			if err := n.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("%s setup %v: %v", tg.name, s, err)
			}
		}
	}
	type client struct {
		conn net.Conn
		r    *resp.Reader
	}
	clients := map[string]*client{}
	defer func() {
		for _, c := range clients {
			c.conn.Close()
		}
	}()
	// run names this play: pub/sub channels carry it, because in a
	// cluster a message published in an earlier play can still be on its
	// way over the cluster bus to another node. Recorded frames show it as
	// "####" (the same length, so bulk lengths stay comparable). The name
	// starts with a letter so that no number in a reply can contain it.
	plays++
	run := fmt.Sprintf("z%03d", plays%1000)
	vars := map[string]string{"run": run}
	out := transcript{}
	record := func(name, frame string) {
		out[name] = append(out[name], strings.ReplaceAll(frame, run, "####"))
	}
	for i, st := range sc.steps {
		c := clients[st.c]
		if c == nil {
			conn, err := net.Dial("tcp", tg.addr)
			if err != nil {
				t.Fatalf("%s: client %s: %v", tg.name, st.c, err)
			}
			c = &client{conn: conn, r: resp.NewReader(conn, 4096, replyLimits)}
			clients[st.c] = c
			if proto == 3 {
				// The HELLO reply names the connection (id) and the
				// server: compared in its shape only.
				write(t, c.conn, resp.AppendArgs(nil, [][]byte{[]byte("HELLO"), []byte("3")}))
				f := readFrame(c.conn, c.r)
				record(st.c, shape(f))
			}
		}
		var b []byte
		n := 0
		switch {
		case st.cmd != nil:
			b = resp.AppendArgs(b, expand(st.cmd, vars))
			n = 1
		case st.cmds != nil:
			for _, cmd := range st.cmds {
				b = resp.AppendArgs(b, expand(cmd, vars))
			}
			n = len(st.cmds)
		default:
			b = []byte(st.raw)
		}
		if st.read > 0 || st.noRead || st.untilClose {
			n = st.read
		}
		if len(b) > 0 {
			if _, err := c.conn.Write(b); err != nil {
				record(st.c, "<write error>")
			}
		}
		if st.close {
			c.conn.Close()
			delete(clients, st.c)
		}
		if st.blocked > 0 || st.unblocked {
			waitBlocked(t, tg, st.blocked, i)
		}
		if st.busy {
			waitBusy(t, tg, i)
		}
		if st.close {
			continue
		}
		for k := 0; k < n; k++ {
			f := readFrame(c.conn, c.r)
			if st.save != "" && k == 0 {
				vars[st.save] = value(f)
			}
			if st.mask != nil {
				f = st.mask(f)
			}
			record(st.c, f)
		}
		if st.untilClose {
			for {
				f := readFrame(c.conn, c.r)
				record(st.c, f)
				if f == "<closed>" || f == "<timeout>" {
					break
				}
			}
		}
	}
	return out
}

// replyLimits read whatever Redis or the proxy sends.
var replyLimits = resp.Limits{MaxBulk: 1 << 40, MaxArgs: 1 << 40, MaxInline: 1 << 40, MaxDepth: 1 << 20}

// plays counts plays, to name each one's pub/sub channels.
var plays int

// readTimeout bounds one frame: a frame that does not come is recorded as
// "<timeout>" so that a hang shows as a difference, not a stuck test.
const readTimeout = 10 * time.Second

func readFrame(conn net.Conn, r *resp.Reader) string {
	conn.SetReadDeadline(time.Now().Add(readTimeout))
	var rep resp.Reply
	if err := r.ReadReply(&rep); err != nil {
		var ne net.Error
		switch {
		case err == io.EOF, isReset(err):
			return "<closed>"
		case errorsAs(err, &ne) && ne.Timeout():
			return "<timeout>"
		}
		return "<error " + err.Error() + ">"
	}
	return string(rep.Raw)
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

func write(t *testing.T, c net.Conn, b []byte) {
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

var varRef = regexp.MustCompile(`\$\{(\w+)\}`)

func expand(cmd []string, vars map[string]string) [][]byte {
	out := make([][]byte, len(cmd))
	for i, a := range cmd {
		out[i] = []byte(varRef.ReplaceAllStringFunc(a, func(m string) string { return vars[m[2:len(m)-1]] }))
	}
	return out
}

// value is a frame's scalar: an integer's digits or a bulk string's bytes.
func value(f string) string {
	switch {
	case strings.HasPrefix(f, ":"):
		return strings.TrimSpace(f[1:])
	case strings.HasPrefix(f, "$"):
		if i := strings.Index(f, "\r\n"); i > 0 {
			return strings.TrimSuffix(f[i+2:], "\r\n")
		}
	}
	return f
}

// waitBlocked waits until Redis counts n blocked clients (over every node).
func waitBlocked(t *testing.T, tg target, n, step int) {
	t.Helper()
	eventually.Succeeds(t, 10*time.Second, func() error {
		total := 0
		for _, node := range tg.nodes {
			info, err := node.Info(context.Background(), "clients").Result()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
					k, _ := strconv.Atoi(v)
					total += k
				}
			}
		}
		if total != n {
			return fmt.Errorf("%s step %d: %d clients blocked, want %d", tg.name, step, total, n)
		}
		return nil
	})
}

// waitBusy waits until some node answers BUSY.
func waitBusy(t *testing.T, tg target, step int) {
	t.Helper()
	eventually.Succeeds(t, 10*time.Second, func() error {
		for _, node := range tg.nodes {
			if err := node.Ping(context.Background()).Err(); err != nil && strings.HasPrefix(err.Error(), "BUSY") {
				return nil
			}
		}
		return fmt.Errorf("%s step %d: no node busy", tg.name, step)
	})
}

// reset empties a node between scenarios and undoes what scenarios
// configure.
func reset(t *testing.T, n *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for _, cmd := range [][]any{
		{"FLUSHALL"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"},
		{"CONFIG", "SET", "busy-reply-threshold", "5000"},
		{"CONFIG", "SET", "notify-keyspace-events", ""},
		{"CONFIG", "SET", "proto-max-bulk-len", "536870912"},
		{"CLIENT", "UNPAUSE"},
		{"ACL", "DELUSER", "alice"},
		{"CONFIG", "SET", "maxmemory-policy", "noeviction"},
	} {
		if err := n.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("reset %v: %v", cmd, err)
		}
	}
}

// Masks for values that legitimately differ between servers or
// connections.

// anyInt keeps an integer reply's type, not its value.
func anyInt(f string) string {
	if strings.HasPrefix(f, ":") {
		return ":<int>\r\n"
	}
	return f
}

// shape keeps a frame's structure: types and aggregate sizes, not values.
func shape(f string) string {
	r := resp.NewReader(strings.NewReader(f), len(f)+16, replyLimits)
	v, err := r.ReadValue()
	if err != nil {
		return "<shape error " + err.Error() + ">"
	}
	var b strings.Builder
	b.WriteByte(f[0])
	describe(&b, v)
	return b.String()
}

func describe(b *strings.Builder, v any) {
	switch v := v.(type) {
	case []any:
		fmt.Fprintf(b, "[%d:", len(v))
		for _, e := range v {
			describe(b, e)
			b.WriteByte(' ')
		}
		b.WriteByte(']')
	case resp.Push:
		describe(b, []any(v))
	case resp.Error:
		b.WriteString("error")
	case nil:
		b.WriteString("nil")
	default:
		fmt.Fprintf(b, "%T", v)
	}
}

// sameBytes reports the first difference between two transcripts.
func diffTranscripts(want, got transcript) string {
	var b bytes.Buffer
	names := map[string]bool{}
	for n := range want {
		names[n] = true
	}
	for n := range got {
		names[n] = true
	}
	for n := range names {
		w, g := want[n], got[n]
		for i := 0; i < max(len(w), len(g)); i++ {
			var wf, gf string
			if i < len(w) {
				wf = w[i]
			} else {
				wf = "<none>"
			}
			if i < len(g) {
				gf = g[i]
			} else {
				gf = "<none>"
			}
			if wf != gf {
				fmt.Fprintf(&b, "client %s frame %d:\n  direct: %q\n  proxy:  %q\n", n, i, trim(wf), trim(gf))
				if at := firstDiff(wf, gf); at > 300 {
					fmt.Fprintf(&b, "  first difference at byte %d:\n  direct: %q\n  proxy:  %q\n", at, around(wf, at), around(gf, at))
				}
				break
			}
		}
	}
	return b.String()
}

// firstDiff is the offset of the first byte where a and b differ.
func firstDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// around is up to 60 bytes of s either side of at.
func around(s string, at int) string {
	return s[max(0, at-60):min(len(s), at+60)]
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

func errorsAs(err error, target *net.Error) bool {
	for err != nil {
		if ne, ok := err.(net.Error); ok {
			*target = ne
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

var avgTTL, bulkLen = regexp.MustCompile(`avg_ttl=\d+`), regexp.MustCompile(`^([$=])\d+`)

// keyspaceOnly keeps an INFO reply's Keyspace section alone (the other
// sections describe the server that answered: uptime, memory, ...), with
// anyTTL's masks.
func keyspaceOnly(f string) string {
	i := strings.Index(f, "# Keyspace\r\n")
	if i < 0 {
		return anyTTL(f)
	}
	rest := f[i:]
	if j := strings.Index(rest, "\r\n\r\n#"); j >= 0 {
		rest = rest[:j+2]
	}
	return anyTTL(f[:1] + "<len>\r\n" + strings.TrimSuffix(rest, "\r\n"))
}

// anyTTL hides INFO keyspace's avg_ttl (an estimate that moves with the
// clock) and so its bulk length.
func anyTTL(f string) string {
	return bulkLen.ReplaceAllString(avgTTL.ReplaceAllString(f, "avg_ttl=<ms>"), "$1<len>")
}
