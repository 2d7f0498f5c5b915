package capture

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// FuzzParser: whatever the bytes and however they are cut, the parser
// never panics, keeps at most its buffer, and never emits an argument of
// AUTH or HELLO; bytes that parse whole parse the same in any pieces.
// The seed corpus runs in every `go test`.
func FuzzParser(f *testing.F) {
	f.Add([]byte(cmd("GET", "k")+cmd("AUTH", "pw")+cmd("SET", "k", "v")), []byte{3, 1, 9})
	f.Add([]byte("PING\r\n"+cmd("MGET", "a", "b")+"*2\r\n$3\r\nGET\r\n$99999\r\nxx"), []byte{1})
	f.Add([]byte("\r\n*1\r\n$4\r\nPING\r\n*-1\r\n*0\r\n"+cmd("EVAL", "s", "1", "k")), []byte{0, 2})
	f.Add([]byte(cmd("HELLO", "3", "AUTH", "u", "pw")+cmd("XREAD", "STREAMS", "s", "0")), []byte{5, 5, 5})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		emitted := func(step func(p *parser, b []byte)) (out []string) {
			p := newParser(DefaultFlowBuffer, nil)
			p.emit = func(p *parser) {
				if len(p.buf) > DefaultFlowBuffer {
					t.Fatalf("buffer of %d bytes", len(p.buf))
				}
				if len(p.args) > 0 && p.args[0] != nil && (bytes.EqualFold(p.args[0], []byte("AUTH")) || bytes.EqualFold(p.args[0], []byte("HELLO"))) {
					for _, a := range p.args[1:] {
						if a != nil {
							t.Fatalf("%s kept an argument", p.args[0])
						}
					}
				}
				var s []byte
				for _, a := range p.args {
					s = append(append(s, a...), 0)
				}
				out = append(out, string(s))
			}
			p.startSynced()
			step(p, data)
			return out
		}
		whole := emitted(func(p *parser, b []byte) { p.feed(b) })
		pieces := emitted(func(p *parser, b []byte) {
			for i := 0; len(b) > 0; i++ {
				n := 1
				if len(cuts) > 0 {
					n = int(cuts[i%len(cuts)]) + 1
				}
				n = min(n, len(b))
				p.feed(b[:n])
				b = b[n:]
			}
		})
		if !slices.Equal(whole, pieces) {
			t.Fatalf("whole %q, in pieces %q", whole, pieces)
		}
	})
}

// FuzzTracker: segments in any order, repeated or missing, never panic the
// tracker or make it hold more than its reorder bounds, and count the same
// batched (aggBatch) as with every add made at once.
func FuzzTracker(f *testing.F) {
	f.Add([]byte(cmd("GET", "k")+cmd("SET", "k", "v")+cmd("GET", "k")), []byte{0, 10, 20, 5, 40})
	f.Add([]byte("garbage\r\n"+cmd("INCR", "c")), []byte{3, 3, 200})
	f.Add([]byte(cmd("READONLY")+cmd("GET", "a")+cmd("READWRITE")+cmd("SET", "b", "v")), []byte{0, 8, 16, 30, 50})
	f.Fuzz(func(t *testing.T, data, order []byte) {
		// As FuzzTrackerReplies: adds at once, batched per packet and per
		// block, the same counts and stats.
		ref := trackRequests(t, data, order, -1)
		for _, block := range []int{0, 1 + len(order)%7} {
			if got := trackRequests(t, data, order, block); got != ref {
				t.Fatalf("blocks of %d: %s\nadds at once: %s", block, got, ref)
			}
		}
	})
}

func trackRequests(t *testing.T, data, order []byte, block int) string {
	tr := newTracker(Limits{ReorderBuffer: 64, ReorderTotal: 128, MaxKeys: 3}, 1, 0)
	tr.unbatched = block < 0
	// The standalone target and a cluster target in which the server
	// serves half the slots (the other half another node's).
	scope := scopeT
	scope.Targets = append(slices.Clone(scopeT.Targets), Target{Policy: "shop/c", Namespace: "shop", Slots: []SlotRange{
		{Start: 0, End: 8191, Master: srv, Replicas: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.10:6379")}},
		{Start: 8192, End: 16383, Master: netip.MustParseAddrPort("10.0.0.11:6379")}}})
	tr.setScope(scope)
	c := netip.AddrPortFrom(podA, 1)
	tr.packet(0, &segment{client: c, server: srv, seq: 0, syn: true})
	for i, o := range order {
		if block > 0 && i%block == 0 {
			tr.beginBlock()
		}
		start := int(o) % (len(data) + 1)
		end := min(len(data), start+1+i%17)
		tr.packet(int64(i), &segment{client: c, server: srv, seq: 1 + uint32(start), payload: data[start:end]})
		if tr.oooTotal > 128+17 || tr.oooTotal < 0 {
			t.Fatalf("holding %d out-of-order bytes", tr.oooTotal)
		}
		if block > 0 && (i%block == block-1 || i == len(order)-1) {
			tr.endBlock()
		}
	}
	return fmt.Sprint(totals(tr), tr.statsNow())
}

// FuzzReplyParser: whatever the bytes and however they are cut, the reply
// parser never panics, never opens more than replyMaxDepth aggregates, and
// ends the same replies, of the same sizes, whole or in pieces; their
// sizes never exceed the bytes fed.
func FuzzReplyParser(f *testing.F) {
	f.Add([]byte("+OK\r\n$3\r\nabc\r\n*2\r\n:1\r\n$-1\r\n>2\r\n+a\r\n+b\r\n%1\r\n+k\r\n,1.5\r\n"), []byte{1, 4, 9})
	f.Add([]byte("|1\r\n+ttl\r\n:3\r\n$1\r\nx\r\n~0\r\n_\r\n=5\r\ntxt:a\r\n!1\r\ne\r\n"), []byte{0})
	f.Add([]byte("*3\r\n*1\r\n*0\r\n$100\r\nab"), []byte{2, 2})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		run := func(pieces bool) (sizes []int, ok bool) {
			r := replyParser{}
			r.done = func(size int, push bool) {
				if push {
					size = -size
				}
				sizes = append(sizes, size)
			}
			b := data
			for i := 0; len(b) > 0; i++ {
				n := len(b)
				if pieces && len(cuts) > 0 {
					n = min(n, int(cuts[i%len(cuts)])+1)
				}
				if !r.feed(b[:n], 0) {
					return sizes, false
				}
				if r.depth > replyMaxDepth {
					t.Fatalf("%d aggregates open", r.depth)
				}
				if size, _, ok := r.estimate(); ok && size < 0 {
					t.Fatalf("estimate %d", size)
				}
				b = b[n:]
			}
			return sizes, true
		}
		whole, okW := run(false)
		pieces, okP := run(true)
		if okW != okP || okW && !slices.Equal(whole, pieces) {
			t.Fatalf("whole %v (%v), in pieces %v (%v)", whole, okW, pieces, okP)
		}
		total := 0
		for _, s := range whole {
			total += max(s, -s)
		}
		if total > len(data) {
			t.Fatalf("sizes %v over %d bytes", whole, len(data))
		}
	})
}

// FuzzTrackerReplies: requests and replies in any order, cut anywhere,
// partly uncaptured, with any ACK numbers, never panic the tracker, keep
// its queues within their bounds and what it holds for them accounted,
// and count the same batched (aggBatch) as with every add made at once.
func FuzzTrackerReplies(f *testing.F) {
	f.Add([]byte(cmd("GET", "k")+cmd("HGETALL", "h")), []byte("$1\r\nv\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"), []byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte(cmd("MULTI")+cmd("GET", "k")+cmd("EXEC")+cmd("SUBSCRIBE", "c")), []byte("+OK\r\n+QUEUED\r\n*1\r\n$1\r\nv\r\n>3\r\n"), []byte{9, 200, 31, 7})
	f.Fuzz(func(t *testing.T, req, rep, order []byte) {
		// Three ways: adds made at once (the reference), batched per
		// packet, batched per block of a few packets; the same counts and
		// stats (a bound of 3 keys, so drops too).
		var ref string
		for mode, block := range []int{-1, 0, 1 + len(order)%7} {
			got := trackReplies(t, req, rep, order, block)
			if mode == 0 {
				ref = got
			} else if got != ref {
				t.Fatalf("blocks of %d: %s\nadds at once: %s", block, got, ref)
			}
		}
	})
}

// trackReplies runs FuzzTrackerReplies' packets (block: as in
// TestTrackerBatchCountsAsOneAtATime) and returns the counts and stats.
func trackReplies(t *testing.T, req, rep, order []byte, block int) string {
	tr := newTracker(Limits{MaxKeys: 3}, 1, 1)
	tr.unbatched = block < 0
	tr.setScope(scopeT)
	c := netip.AddrPortFrom(podA, 1)
	tr.packet(0, &segment{client: c, server: srv, seq: 0, syn: true})
	tr.packet(0, &segment{client: srv, server: c, seq: 0, ack: 1, syn: true})
	for i, o := range order {
		if block > 0 && i%block == 0 {
			tr.beginBlock()
		}
		if o&1 == 0 {
			start := int(o>>1) % (len(req) + 1)
			end := min(len(req), start+1+i%23)
			tr.packet(int64(i), &segment{client: c, server: srv, seq: 1 + uint32(start), ack: 1 + uint32(i*7)%uint32(len(rep)+1), payload: req[start:end]})
		} else {
			start := int(o>>1) % (len(rep) + 1)
			end := min(len(rep), start+1+i%13)
			tr.packet(int64(i), &segment{client: srv, server: c, seq: 1 + uint32(start), ack: 1 + uint32(len(req)), payload: rep[start:end], wire: end - start + int(o%3)})
		}
		held := 0
		for _, fl := range tr.flows {
			if r := fl.r; r != nil {
				held += r.held()
				if len(r.q)-r.qh > replyMaxPending || len(r.keys) > replyMaxKeys {
					t.Fatalf("%d queued, %d key bytes", len(r.q)-r.qh, len(r.keys))
				}
			}
		}
		if held != tr.replyHeld || held > replyHeldTotal {
			t.Fatalf("held %d, accounted %d", held, tr.replyHeld)
		}
		if block > 0 && (i%block == block-1 || i == len(order)-1) {
			tr.endBlock()
		}
	}
	return fmt.Sprint(totals(tr), tr.statsNow())
}
