package capture

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

var (
	srv    = netip.MustParseAddrPort("10.0.0.9:6379")
	podA   = netip.MustParseAddr("10.1.0.5")
	podB   = netip.MustParseAddr("10.1.0.6")
	scopeT = Scope{
		Targets: []Target{{Policy: "shop/p", Namespace: "shop", Endpoints: []netip.AddrPort{srv}}},
		Pods:    map[netip.Addr]string{podA: "shop", podB: "other"},
	}
)

// stream is a client connection whose bytes the test sends as segments.
type stream struct {
	client netip.AddrPort
	seq    uint32
}

func (s *stream) syn(tr *tracker) {
	tr.packet(0, &segment{client: s.client, server: srv, seq: s.seq, syn: true})
	s.seq++
}

// send returns the segment of the next len(b) bytes (not yet handled).
func (s *stream) next(b string) *segment {
	seg := &segment{client: s.client, server: srv, seq: s.seq, payload: []byte(b)}
	s.seq += uint32(len(b))
	return seg
}

func totals(tr *tracker) map[string]sidecarlink.Entry {
	out := map[string]sidecarlink.Entry{}
	tr.flush(func(policy string, es []sidecarlink.Entry) {
		for _, e := range es {
			out[policy+" "+string(e.Key)] = e
		}
	})
	return out
}

func TestTrackerReassembles(t *testing.T) {
	tr := newTracker(Limits{}, 1, 0)
	tr.setScope(scopeT)
	s := &stream{client: netip.AddrPortFrom(podA, 40000), seq: 1000}
	s.syn(tr)
	a, b, c := s.next(cmd("GET", "k1")), s.next(cmd("SET", "k1", "v")), s.next(cmd("GET", "k1"))
	// Out of order, with a retransmission of a.
	tr.packet(1, c)
	tr.packet(2, a)
	tr.packet(3, a)
	tr.packet(4, b)
	got := totals(tr)["shop/p k1"]
	if got.Reads != 2 || got.Writes != 1 || got.Bytes != uint32(len(b.payload)) {
		t.Fatalf("k1: %+v, want 2 reads and 1 write of %d bytes", got, len(b.payload))
	}
	// A lost segment: the command it held is lost, the next ones count.
	lost := s.next(cmd("GET", "k2") + cmd("GET", "k2")[:5])
	_ = lost
	after := s.next(cmd("GET", "k2")[5:] + cmd("GET", "k2"))
	tr.lim.ReorderBuffer = 1 // nothing held: the hole is taken as lost at once
	tr.packet(5, after)
	if got := totals(tr)["shop/p k2"]; got.Reads != 1 {
		t.Fatalf("after a loss: %+v, want the one whole command after it", got)
	}
	if tr.stats.Gaps != 1 || tr.stats.Resyncs != 1 {
		t.Errorf("gaps %d resyncs %d, want 1 and 1", tr.stats.Gaps, tr.stats.Resyncs)
	}
}

func TestTrackerAttributes(t *testing.T) {
	tr := newTracker(Limits{}, 1, 0)
	tr.setScope(scopeT)
	other := &stream{client: netip.AddrPortFrom(podB, 40000)}                          // another namespace
	unknown := &stream{client: netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), 1)} // a pod with the sidecar, or none known
	mine := &stream{client: netip.AddrPortFrom(podA, 40001)}
	for _, s := range []*stream{other, unknown, mine} {
		s.syn(tr)
		tr.packet(1, s.next(cmd("GET", "k")+cmd("SELECT", "1")+cmd("GET", "k1")+cmd("SELECT", "0")+cmd("GET", "k")))
	}
	got := totals(tr)
	if len(got) != 1 || got["shop/p k"].Reads != 2 {
		t.Fatalf("got %+v, want 2 reads of k (database 0) from the pod of the policy's namespace only", got)
	}
}

func TestTrackerBounds(t *testing.T) {
	tr := newTracker(Limits{MaxFlows: 2, IdleTimeout: time.Second, MaxKeys: 2}, 4, 0)
	tr.setScope(scopeT)
	for i := range 3 {
		s := &stream{client: netip.AddrPortFrom(podA, uint16(5000+i))}
		s.syn(tr)
		tr.packet(0, s.next(cmd("GET", "a")+cmd("GET", "b")+cmd("GET", "c")))
	}
	if tr.stats.FlowsRefused != 2 || len(tr.flows) != 2 {
		t.Errorf("flows %d refused %d, want 2 and 2 (the third connection's two packets)", len(tr.flows), tr.stats.FlowsRefused)
	}
	if tr.stats.KeysDropped != 2 {
		t.Errorf("keys dropped %d, want 2 (c, on each of two connections)", tr.stats.KeysDropped)
	}
	got := totals(tr)
	// Two connections counted, each count stands for 4 (the sampling).
	if got["shop/p a"].Reads != 8 || got["shop/p b"].Reads != 8 {
		t.Errorf("got %+v, want 8 reads of a and b (2 × 4)", got)
	}
	tr.sweep(int64(2 * time.Second))
	if len(tr.flows) != 0 || tr.stats.Evicted != 2 {
		t.Errorf("after the idle timeout: %d flows, %d evicted", len(tr.flows), tr.stats.Evicted)
	}
	s := &stream{client: netip.AddrPortFrom(podA, 6000)}
	s.syn(tr)
	tr.packet(0, &segment{client: s.client, server: srv, seq: s.seq, fin: true})
	if len(tr.flows) != 0 {
		t.Error("a closed connection is still tracked")
	}
}

// BenchmarkTracker is the tracker's cost per command, one command per
// packet (pipeline depth 1, the worst case), GET and SET alternating:
// "hot" over 1,352 keys on 64 connections (most keys repeat within an
// interval), "random" as the capture bench's redis-benchmark sends them
// (8 connections, keys drawn from 100,000, 3-byte values, a flush every
// 10,000 commands: 100 ms at 100,000 commands/s), where most keys are new
// in each interval.
func BenchmarkTracker(b *testing.B) {
	hot := func(i int) string {
		return "product:" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%2))
	}
	b.Run("standalone", func(b *testing.B) { benchTracker(b, scopeT, 64, 4096, hot, "0123456789abcdef0123456789abcdef", false) })
	// A cluster target whose one master (the server) serves every slot:
	// every command counts, after its slot is looked up.
	cluster := Scope{Targets: []Target{{Policy: "shop/p", Namespace: "shop",
		Slots: []SlotRange{{Start: 0, End: 16383, Master: srv}}}}, Pods: scopeT.Pods}
	b.Run("cluster", func(b *testing.B) { benchTracker(b, cluster, 64, 4096, hot, "0123456789abcdef0123456789abcdef", false) })
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(int) string { return fmt.Sprintf("key:%012d", rng.IntN(100000)) }
	b.Run("random", func(b *testing.B) { benchTracker(b, scopeT, 8, 1<<16, random, "xxx", false) })
	// The same with the caches cold at each block, as the capture finds
	// them when it wakes after the other processes ran: 32 MiB written
	// between blocks (not timed).
	b.Run("random-cold", func(b *testing.B) { benchTracker(b, scopeT, 8, 1<<16, random, "xxx", true) })
}

var evictBuf = make([]byte, 32<<20)

func evictCaches() {
	for i := 0; i < len(evictBuf); i += 64 {
		evictBuf[i]++
	}
}

func benchTracker(b *testing.B, scope Scope, conns, cmds int, key func(int) string, value string, cold bool) {
	tr := newTracker(Limits{}, 1, 0)
	tr.setScope(scope)
	var streams []*stream
	for i := range conns {
		s := &stream{client: netip.AddrPortFrom(podA, uint16(10000+i))}
		s.syn(tr)
		streams = append(streams, s)
	}
	var segs []segment
	for i := range cmds {
		k := key(i)
		c := cmd("GET", k)
		if i%2 == 1 {
			c = cmd("SET", k, value)
		}
		segs = append(segs, *streams[i%conns].next(c))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(segs) == 0 && i > 0 {
			b.StopTimer()
			for j := range segs { // the next round of the same streams
				segs[j].seq += uint32(len(segs[j].payload)) * uint32(len(segs)/conns)
			}
			b.StartTimer()
		}
		// As the capture reads them: in ring blocks (here of 512 packets).
		if i%512 == 0 {
			if cold {
				b.StopTimer()
				evictCaches()
				b.StartTimer()
			}
			tr.beginBlock()
		}
		s := segs[i%len(segs)]
		tr.packet(int64(i), &s)
		if i%512 == 511 || i == b.N-1 {
			tr.endBlock()
		}
		if i%10000 == 9999 {
			tr.flush(func(string, []sidecarlink.Entry) {})
		}
	}
	if tr.stats.Gaps != 0 || tr.stats.Counted == 0 {
		b.Fatalf("gaps %d, counted %d: the segments are not in sequence", tr.stats.Gaps, tr.stats.Counted)
	}
}

// TestTrackerMidwayDatabase: a connection whose database the capture cannot
// know (first seen midway, or with bytes that went by unparsed while it
// counted for no target) is counted for no standalone target until a
// SELECT or RESET it sees says which database it uses; on a cluster target
// (database 0 only) it is counted at once.
func TestTrackerMidwayDatabase(t *testing.T) {
	tr := newTracker(Limits{}, 1, 0)
	tr.setScope(scopeT)
	midway := &stream{client: netip.AddrPortFrom(podA, 40002), seq: 5000} // no SYN seen
	tr.packet(1, midway.next(cmd("GET", "unknown")))
	tr.packet(2, midway.next(cmd("SELECT", "0")+cmd("GET", "selected")))
	tr.packet(3, midway.next(cmd("SELECT", "3")+cmd("GET", "db3")+cmd("RESET")+cmd("GET", "reset")))
	got := totals(tr)
	for key, want := range map[string]uint32{"unknown": 0, "selected": 1, "db3": 0, "reset": 1} {
		if g := got["shop/p "+key].Reads; g != want {
			t.Errorf("%s: %d reads, want %d", key, g, want)
		}
	}

	// Seen from its start, but its SELECT went by while no target counted
	// it (its pod was not in the scope yet).
	tr2 := newTracker(Limits{}, 1, 0)
	tr2.setScope(Scope{Targets: scopeT.Targets})
	late := &stream{client: netip.AddrPortFrom(podA, 40003)}
	late.syn(tr2)
	tr2.packet(1, late.next(cmd("SELECT", "3")))
	tr2.setScope(scopeT)
	tr2.packet(2, late.next(cmd("GET", "after-scope")))
	if g := totals(tr2)["shop/p after-scope"].Reads; g != 0 {
		t.Errorf("a connection whose SELECT went unparsed: %d reads counted, want 0", g)
	}

	// A cluster target: database 0 is the only one.
	cl := Scope{
		Targets: []Target{{Policy: "shop/c", Namespace: "shop", Slots: []SlotRange{{Start: 0, End: 16383, Master: srv}}}},
		Pods:    scopeT.Pods,
	}
	tr3 := newTracker(Limits{}, 1, 0)
	tr3.setScope(cl)
	m := &stream{client: netip.AddrPortFrom(podA, 40004), seq: 7000}
	tr3.packet(1, m.next(cmd("GET", "k")))
	if g := totals(tr3)["shop/c k"].Reads; g != 1 {
		t.Errorf("a midway connection to a cluster node: %d reads, want 1", g)
	}
}
