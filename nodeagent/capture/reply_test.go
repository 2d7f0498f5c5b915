package capture

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// replySizes feeds b to a reply parser in pieces of n bytes and returns
// the sizes of the replies it ended (a push frame as its negative).
func replySizes(t *testing.T, b string, n int) []int {
	t.Helper()
	var out []int
	r := replyParser{done: func(size int, push bool) {
		if push {
			size = -size
		}
		out = append(out, size)
	}}
	for len(b) > 0 {
		k := min(n, len(b))
		if !r.feed([]byte(b[:k]), 0) {
			t.Fatalf("%q: not followed", b[:k])
		}
		b = b[k:]
	}
	return out
}

func TestReplyParserSizes(t *testing.T) {
	replies := []string{
		"+OK\r\n", "$-1\r\n", "*-1\r\n", "$0\r\n\r\n", "$5\r\nab\ncd\r\n", ":12345\r\n", "-ERR wrong\r\n",
		"*2\r\n$1\r\na\r\n:5\r\n", "*0\r\n", "*2\r\n*1\r\n$2\r\nxy\r\n*0\r\n",
		"%1\r\n+a\r\n,1.5\r\n", "~2\r\n#t\r\n_\r\n", "=8\r\ntxt:abcd\r\n", "!3\r\nerr\r\n", "(12345678901234567890\r\n",
		"|1\r\n+ttl\r\n:3\r\n$1\r\nx\r\n", // an attribute and the value it describes: one reply
	}
	push := ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n"
	var want []int
	all := ""
	for i, r := range replies {
		want = append(want, len(r))
		all += r
		if i == 3 {
			want = append(want, -len(push))
			all += push
		}
	}
	for _, n := range []int{1, 2, 7, len(all)} {
		if got := replySizes(t, all, n); !slices.Equal(got, want) {
			t.Errorf("pieces of %d: sizes %v, want %v", n, got, want)
		}
	}
	for _, bad := range []string{"?\r\n", "$x\r\n", "$-2\r\n", "*12345678901234567\r\n", "$5\n", strings.Repeat("*1\r\n", replyMaxDepth+1)} {
		var r replyParser
		if r.feed([]byte(bad), 0) {
			t.Errorf("%q followed", bad)
		}
	}
}

// A bulk's bytes need not be captured: its header says how many to pass.
// A header among them cannot be passed over; the reply cut there is
// estimated.
func TestReplyParserUncaptured(t *testing.T) {
	var sizes []int
	r := replyParser{done: func(size int, _ bool) { sizes = append(sizes, size) }}
	if !r.feed([]byte("$1000\r\nabc"), 500) || !r.feed(nil, 499) {
		t.Fatal("a bulk's uncaptured bytes not passed")
	}
	if !slices.Equal(sizes, []int{7 + 1000 + 2}) {
		t.Fatalf("sizes %v", sizes)
	}
	if r.feed([]byte("$3\r\nabc\r\n"), 1) {
		t.Fatal("an uncaptured header passed")
	}
	// An array of 4 whose first element is walked, cut in its second: 4 + 4 × 9.
	r.reset()
	if !r.feed([]byte("*4\r\n$3\r\nabc\r\n$3\r\na"), 0) {
		t.Fatal("not followed")
	}
	if size, _, ok := r.estimate(); !ok || size != 4+4*9 {
		t.Errorf("estimate %d, %v; want 40", size, ok)
	}
	// A top-level bulk cut: its size is exact.
	r.reset()
	_ = r.feed([]byte("$100\r\nab"), 0)
	if size, _, ok := r.estimate(); !ok || size != 108 {
		t.Errorf("estimate %d, %v; want 108", size, ok)
	}
}

// conn is one connection of a tracker test, both ways.
type conn struct {
	tr       *tracker
	cli      netip.AddrPort
	seq, ack uint32 // the client's next byte, the server's next byte
}

// replyTracker is a tracker following every connection's replies, with
// one connection from podA opened.
func replyTracker(port uint16) (*tracker, *conn) {
	tr := newTracker(Limits{}, 1, 1)
	tr.setScope(scopeT)
	return tr, newConn(tr, port)
}

func newConn(tr *tracker, port uint16) *conn {
	c := &conn{tr: tr, cli: netip.AddrPortFrom(podA, port), seq: 100, ack: 5000}
	tr.packet(0, &segment{client: c.cli, server: srv, seq: c.seq, syn: true})
	tr.packet(0, &segment{client: srv, server: c.cli, seq: c.ack, ack: c.seq + 1, syn: true})
	c.seq++
	c.ack++
	return c
}

// send sends requests, acknowledging every reply byte so far.
func (c *conn) send(b string) {
	c.tr.packet(0, &segment{client: c.cli, server: srv, seq: c.seq, ack: c.ack, payload: []byte(b)})
	c.seq += uint32(len(b))
}

// reply sends reply bytes, uncaptured more after them.
func (c *conn) reply(b string, uncaptured int) {
	c.tr.packet(0, &segment{client: srv, server: c.cli, seq: c.ack, ack: c.seq, payload: []byte(b), wire: len(b) + uncaptured})
	c.ack += uint32(len(b) + uncaptured)
}

func sizesOf(tr *tracker) map[string]uint32 {
	out := map[string]uint32{}
	tr.flush(func(_ string, es []sidecarlink.Entry) {
		for _, e := range es {
			if e.Size > 0 {
				out[string(e.Key)] = e.Size
			}
		}
	})
	return out
}

func TestTrackerReplySizes(t *testing.T) {
	tr, c := replyTracker(40000)
	// A pipeline: a write, two reads, a push frame between their replies.
	c.send(cmd("SET", "w", "xyz") + cmd("GET", "a") + cmd("HGETALL", "h"))
	c.reply("+OK\r\n$3\r\nabc\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n%1\r\n$1\r\nf\r\n$2\r\nvv\r\n", 0)
	// A transaction: nothing of it sized; a read after it is.
	c.send(cmd("MULTI") + cmd("GET", "t") + cmd("EXEC") + cmd("GET", "b"))
	c.reply("+OK\r\n+QUEUED\r\n*1\r\n$4\r\nlong\r\n$2\r\nbb\r\n", 0)
	// A large string: its bytes not captured.
	c.send(cmd("GET", "big"))
	c.reply("$1000000\r\nxx", 1000000)
	got := sizesOf(tr)
	want := map[string]uint32{"w": uint32(len(cmd("SET", "w", "xyz"))), "a": 9, "h": 19, "b": 8, "big": 1000012}
	if !mapsEqual(got, want) {
		t.Errorf("sizes %v, want %v", got, want)
	}
	if tr.stats.Replies != 8 || tr.stats.ReplyLost != 0 {
		t.Errorf("stats %+v", tr.stats)
	}
}

// Out of step, nothing is sized until a request sent with every reply
// byte received is answered and the next one confirms it.
func TestTrackerReplyResync(t *testing.T) {
	tr, c := replyTracker(40001)
	c.send(cmd("GET", "a") + cmd("GET", "b"))
	c.reply("$1\r\na\r\n$200\r\n", 2000) // the next header not captured
	c.send(cmd("GET", "c"))              // tentative from here
	c.reply("$2\r\ncc\r\n", 0)
	c.send(cmd("GET", "d")) // confirmed
	c.reply("$3\r\nddd\r\n", 0)
	got := sizesOf(tr)
	// b's reply is cut, but a bulk's header says its size; c's is not
	// counted (tentative).
	if want := map[string]uint32{"a": 7, "b": 208, "d": 9}; !mapsEqual(got, want) {
		t.Errorf("sizes %v, want %v", got, want)
	}
	// A reply with no request waiting: out of step again.
	c.reply("$1\r\nx\r\n", 0)
	c.send(cmd("GET", "e"))
	c.reply("$1\r\ne\r\n", 0)
	if got := sizesOf(tr); len(got) != 0 || tr.stats.ReplyUnmatched != 1 {
		t.Errorf("sizes %v after an unmatched reply; stats %+v", got, tr.stats)
	}
	// A hole in the replies (a dropped copy).
	c.send(cmd("GET", "f"))
	c.ack += 10
	c.reply("$1\r\nf\r\n", 0)
	if got := sizesOf(tr); len(got) != 0 {
		t.Errorf("sizes %v after a hole", got)
	}
}

// A connection with commands in flight when it loses step (a client that
// sends while replies are due) is not matched again: the replies of the
// commands lost with the stream may come after the next ones are sent.
func TestTrackerReplyStuckWhenConcurrent(t *testing.T) {
	tr, c := replyTracker(40005)
	c.send(cmd("GET", "a"))
	c.send(cmd("GET", "b")) // sent before a's reply
	c.reply("$1\r\na\r\n$300\r\n", 3000)
	for _, k := range []string{"c", "d", "e"} {
		c.send(cmd("GET", k))
		c.reply("$1\r\nx\r\n", 0)
	}
	if got := sizesOf(tr); !mapsEqual(got, map[string]uint32{"a": 7, "b": 308}) {
		t.Errorf("sizes %v, want a's and b's only", got)
	}
	// It reconnects: in step again.
	c = newConn(tr, 40005)
	c.send(cmd("GET", "f"))
	c.reply("$1\r\nf\r\n", 0)
	if got := sizesOf(tr); !mapsEqual(got, map[string]uint32{"f": 7}) {
		t.Errorf("sizes %v after reconnecting", got)
	}
}

// A subscribed connection's messages are never taken for replies, nor
// replies after CLIENT REPLY given to the commands they do not answer.
func TestTrackerReplySubscribed(t *testing.T) {
	tr, c := replyTracker(40002)
	c.send(cmd("SUBSCRIBE", "ch"))
	c.reply("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n", 0)
	c.send(cmd("GET", "k")) // (an error in RESP2: the connection is subscribed)
	c.reply("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nworld\r\n", 0)
	if got := sizesOf(tr); len(got) != 0 {
		t.Errorf("sizes %v on a subscribed connection", got)
	}
	// CLIENT REPLY SKIP: the next command has no reply.
	c = newConn(tr, 40004)
	c.send(cmd("CLIENT", "REPLY", "SKIP") + cmd("GET", "a") + cmd("GET", "b"))
	c.reply("$2\r\nbb\r\n", 0)
	if got := sizesOf(tr); len(got) != 0 {
		t.Errorf("sizes %v after CLIENT REPLY SKIP", got)
	}
}

// The queue of requests awaiting replies is bounded, whatever is sent.
func TestTrackerReplyQueueBounded(t *testing.T) {
	tr, c := replyTracker(40003)
	for range replyMaxPending + 10 {
		c.send(cmd("GET", strings.Repeat("k", 100)))
	}
	if r := tr.flows[c.cli].r; len(r.q)-r.qh > replyMaxPending || len(r.keys) > replyMaxKeys || tr.stats.ReplyOverflow == 0 {
		t.Errorf("%d queued, %d key bytes, overflow %d", len(r.q)-r.qh, len(r.keys), tr.stats.ReplyOverflow)
	}
	tr.remove(c.cli, tr.flows[c.cli])
	if tr.replyHeld != 0 {
		t.Errorf("%d bytes held after the connection went", tr.replyHeld)
	}
}

func mapsEqual(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
