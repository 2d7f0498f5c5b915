package capture

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"

	"github.com/heatsink-dev/heatsink/sidecarlink"
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
// tracker or make it hold more than its reorder bounds.
func FuzzTracker(f *testing.F) {
	f.Add([]byte(cmd("GET", "k")+cmd("SET", "k", "v")+cmd("GET", "k")), []byte{0, 10, 20, 5, 40})
	f.Add([]byte("garbage\r\n"+cmd("INCR", "c")), []byte{3, 3, 200})
	f.Add([]byte(cmd("READONLY")+cmd("GET", "a")+cmd("READWRITE")+cmd("SET", "b", "v")), []byte{0, 8, 16, 30, 50})
	f.Fuzz(func(t *testing.T, data, order []byte) {
		tr := newTracker(Limits{ReorderBuffer: 64, ReorderTotal: 128}, 1, 0)
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
			start := int(o) % (len(data) + 1)
			end := min(len(data), start+1+i%17)
			tr.packet(int64(i), &segment{client: c, server: srv, seq: 1 + uint32(start), payload: data[start:end]})
			if tr.oooTotal > 128+17 || tr.oooTotal < 0 {
				t.Fatalf("holding %d out-of-order bytes", tr.oooTotal)
			}
		}
		tr.flush(func(string, []sidecarlink.Entry) {})
	})
}
