package transparency

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestGeneratedStateMixes writes seeded random pipelines of the commands
// that change what a connection is (HELLO 2 and 3, RESET, SUBSCRIBE,
// PSUBSCRIBE, SSUBSCRIBE, the unsubscribe family with and without
// channels, in RESP2 and, after a HELLO 3, RESP3) mixed with ordinary ones
// (PING, SET, GET, ECHO) in one write, to Redis directly and through the
// proxy in both serving modes, and compares the replies frame by frame.
// Before, `HELLO 3, UNSUBSCRIBE a, HELLO 2, PING` in one go froze the
// connection for good. Each pipeline ends with PING <sentinel>, whose
// reply (a bulk string, or a pong array in RESP2 pub/sub mode) ends it;
// every frame is read with a deadline, so a frozen connection fails the
// test instead of hanging it. HEATSINK_GEN_SEED replays one seed.
func TestGeneratedStateMixes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("HEATSINK_GEN_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (HEATSINK_GEN_SEED=%d replays it)", seed, seed)
	s := redistest.Standalone(t)
	direct := s.Addr
	proxies := map[string]string{}
	for _, noLoop := range []bool{false, true} {
		name := "proxy-loop"
		if noLoop {
			name = "proxy-sessions"
		}
		proxies[name] = startProxy(t, proxy.Config{Upstreams: []string{s.Addr}, NoEventLoop: noLoop})
	}
	const sequences = 2000
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	start := time.Now()
	for i := range sequences {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("only %d sequences within 3 minutes", i)
		}
		seq := genSequence(rng)
		want := playSequence(t, direct, seq, fmt.Sprintf("g%d:d", i))
		for _, name := range []string{"proxy-loop", "proxy-sessions"} {
			got := playSequence(t, proxies[name], seq, fmt.Sprintf("g%d:%s", i, name))
			if d := diffFrames(want, got); d != "" {
				t.Fatalf("sequence %d (seed %d) through %s:\n  %s\n%s", i, seed, name, strings.Join(seqLines(seq), "\n  "), d)
			}
		}
	}
	t.Logf("%d generated sequences, each direct and through both serving modes, the same", sequences)
}

// genSequence draws 1 to 8 commands; channels are few, so that a
// subscription and an unsubscription meet.
func genSequence(rng *rand.Rand) [][]string {
	chans := func(max int) []string {
		var out []string
		for range rng.IntN(max + 1) {
			out = append(out, "ch"+strconv.Itoa(rng.IntN(3)))
		}
		return out
	}
	n := 1 + rng.IntN(8)
	seq := make([][]string, 0, n)
	for range n {
		var cmd []string
		switch rng.IntN(14) {
		case 0:
			cmd = []string{"HELLO", "2"}
		case 1:
			cmd = []string{"HELLO", "3"}
		case 2:
			cmd = []string{"RESET"}
		case 3:
			cmd = append([]string{"UNSUBSCRIBE"}, chans(2)...)
		case 4:
			cmd = append([]string{"PUNSUBSCRIBE"}, chans(2)...)
		case 5:
			// Shard channels of one slot, so that standalone and cluster
			// agree.
			cmd = []string{"SUNSUBSCRIBE"}
			for range rng.IntN(3) {
				cmd = append(cmd, "{s}ch"+strconv.Itoa(rng.IntN(2)))
			}
		case 6:
			cmd = append([]string{"SUBSCRIBE", "ch" + strconv.Itoa(rng.IntN(3))}, chans(1)...)
		case 7:
			cmd = []string{"PING"}
		case 8:
			cmd = []string{"SET", "${key}", "v" + strconv.Itoa(rng.IntN(10))}
		case 9:
			cmd = []string{"GET", "${key}"}
		case 10:
			cmd = []string{"ECHO", "e" + strconv.Itoa(rng.IntN(10))}
		case 11:
			cmd = []string{"PING", "p"}
		case 12:
			// Patterns named as the channels are, so that PUNSUBSCRIBE
			// names them too.
			cmd = append([]string{"PSUBSCRIBE", "ch" + strconv.Itoa(rng.IntN(3))}, chans(1)...)
		case 13:
			cmd = []string{"SSUBSCRIBE", "{s}ch" + strconv.Itoa(rng.IntN(2))}
		}
		seq = append(seq, cmd)
	}
	return seq
}

func seqLines(seq [][]string) []string {
	out := make([]string, len(seq))
	for i, c := range seq {
		out[i] = strings.Join(c, " ")
	}
	return out
}

// sentinel is the argument of the PING that ends every sequence.
const sentinel = "end-of-sequence"

// playSequence writes seq and the closing PING on a new connection in one
// write and returns the frames up to the closing PING's reply. key names
// the key SET and GET use (one per play, so plays do not see each other's
// writes).
func playSequence(t *testing.T, addr string, seq [][]string, key string) []string {
	t.Helper()
	c := dial(t, addr)
	defer c.conn.Close()
	var b []byte
	for _, cmd := range append(seq, []string{"PING", sentinel}) {
		b = resp.AppendArgs(b, expand(cmd, map[string]string{"key": key}))
	}
	write(t, c.conn, b)
	var frames []string
	for len(frames) < 4*len(seq)+8 {
		f := readFrameWithin(c.conn, c.r, 3*time.Second)
		frames = append(frames, maskHello(f))
		if strings.Contains(f, sentinel) || strings.HasPrefix(f, "<") {
			return frames
		}
	}
	return append(frames, "<too many frames>")
}

// readFrameWithin is readFrame with its own deadline.
func readFrameWithin(conn interface{ SetReadDeadline(time.Time) error }, r *resp.Reader, d time.Duration) string {
	conn.SetReadDeadline(time.Now().Add(d))
	var rep resp.Reply
	if err := r.ReadReply(&rep); err != nil {
		if strings.Contains(err.Error(), "timeout") {
			return "<timeout: the connection froze>"
		}
		return "<error " + err.Error() + ">"
	}
	return string(rep.Raw)
}

// maskHello keeps a HELLO reply's shape: it names the connection's id.
func maskHello(f string) string {
	if (strings.HasPrefix(f, "%") || strings.HasPrefix(f, "*14\r\n")) && strings.Contains(f, "server") {
		return shape(f)
	}
	return f
}

func diffFrames(want, got []string) string {
	for i := range max(len(want), len(got)) {
		w, g := "<none>", "<none>"
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			return fmt.Sprintf("frame %d:\n  direct: %q\n  proxy:  %q", i, w, g)
		}
	}
	return ""
}

// The pipelines of issue 22 that froze a connection, by hand, in the
// suite's scenarios (RESP2 and RESP3, standalone and cluster).
func init() {
	scenarios = append(scenarios,
		scenario{name: "HELLO 3, UNSUBSCRIBE, HELLO 2, PING in one write", fixedProto: true, steps: []step{
			{c: "a", cmds: cmds("HELLO 3", "UNSUBSCRIBE a:${run}", "HELLO 2", "PING"), mask: maskHello},
			{c: "b", cmds: cmds("HELLO 3", "PUNSUBSCRIBE a:${run}", "HELLO 2", "PING"), mask: maskHello},
			{c: "c", cmds: cmds("HELLO 3", "UNSUBSCRIBE a:${run} b:${run}", "RESET", "PING"), read: 5, mask: maskHello},
			{c: "d", cmds: cmds("HELLO 3", "SUNSUBSCRIBE {t}a:${run}", "RESET", "ECHO x"), mask: maskHello},
		}},
	)
}
