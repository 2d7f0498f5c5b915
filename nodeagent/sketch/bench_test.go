package sketch

import (
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/nodeagent/sketch/sketchtest"
)

var (
	benchOnce   sync.Once
	benchStream *sketchtest.Stream
)

// stream is the workload: Zipf(1.0) over 1M distinct keys, 10%
// writes. hack/bench.d/20-node-agent.sh runs the comparison with peers.
func stream() *sketchtest.Stream {
	benchOnce.Do(func() { benchStream = sketchtest.NewStream(1_000_000, 4_000_000, 1.0, 0.1, 42) })
	return benchStream
}

func benchUpdate(b *testing.B, prehash bool) {
	st := stream()
	laid := st.Lay()
	s, err := New(Config{K: 100})
	if err != nil {
		b.Fatal(err)
	}
	var hashes []uint64
	if prehash {
		hashes = make([]uint64, len(laid.Keys))
		for i, k := range laid.Keys {
			hashes[i] = s.Hash(k)
		}
	}
	s.Advance(t0)
	n := len(laid.Keys)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % n
		if j == 0 && i > 0 {
			// A window slide per pass over the stream.
			s.Advance(t0.Add(s.cfg.Window / 10 * time.Duration(i/n)))
		}
		var r, w uint32 = 1, 0
		if laid.Writes[j] {
			r, w = 0, 1
		}
		if prehash {
			s.UpdateHashed(laid.Keys[j], hashes[j], r, w, 64)
		} else {
			s.Update(laid.Keys[j], r, w, 64)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mobs/s")
}

func BenchmarkUpdate(b *testing.B)       { benchUpdate(b, false) }
func BenchmarkUpdateHashed(b *testing.B) { benchUpdate(b, true) }

// BenchmarkSparseUpdates is a quiet node's sketch: a few keys counted per
// slot, each Advance crossing a slot boundary, so most updates land on a
// page of the filter that has fades to catch up on (catchUp). It is the
// fleet simulator's node agent at 5,000 nodes (a few background operations
// per node per tick) and a real node with little traffic.
func BenchmarkSparseUpdates(b *testing.B) {
	st := stream()
	laid := st.Lay()
	s, err := New(Config{K: 100, MemoryBytes: 256 << 10})
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	s.Advance(now)
	n := len(laid.Keys)
	for j := range 20_000 { // a filter with counts in it
		s.Update(laid.Keys[j], 1, 0, 64)
	}
	slot := s.cfg.Window / time.Duration(s.cfg.Slots)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(slot)
		s.Advance(now)
		for k := range 4 {
			s.Update(laid.Keys[(i*4+k)%n], 1, 0, 64)
		}
	}
}
