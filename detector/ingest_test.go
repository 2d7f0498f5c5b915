package detector

import (
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/detector/sketch/sketchtest"
	"github.com/heatsink-dev/heatsink/detector/wire"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
)

// offline is a detector that is never Run: enough to drive handle.
func offline(tb testing.TB, include, exclude []string) *Detector {
	tb.Helper()
	d, err := New(Options{Config: &rest.Config{}, NodeName: node, ListenAddr: "127.0.0.1:0",
		Clock: clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.conn.Close() })
	spec := testPolicy("checkout", include, exclude).Spec
	v1alpha1.SetDefaults(&spec)
	f, err := keyfilter.Compile(spec.Keys.Include, spec.Keys.Exclude)
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.upsertPolicy(ns, "checkout", &spec, f); err != nil {
		tb.Fatal(err)
	}
	return d
}

func TestHandleFilters(t *testing.T) {
	d := offline(t, []string{"product:*"}, []string{"product:secret*"})
	var dec wire.Decoder
	d.handle(&dec, wire.AppendBatch(nil, "shop/checkout", []wire.Entry{
		{Key: []byte("product:1"), Reads: 5}, {Key: []byte("product:secret"), Reads: 5}, {Key: []byte("session:1"), Reads: 5},
	}))
	if s := d.Stats(); s.Batches != 1 || s.Observations != 1 {
		t.Errorf("stats = %+v, want 1 batch with 1 counted entry", s)
	}
	p := d.policies["shop/checkout"]
	if top := p.sk.Top(10); len(top) != 1 || top[0].Key != "product:1" {
		t.Errorf("sketch holds %+v, want only product:1", top)
	}
}

// FuzzHandle: whatever arrives on the socket, the detector does not panic
// and counts only well-formed batches.
func FuzzHandle(f *testing.F) {
	f.Add(wire.AppendBatch(nil, "shop/checkout", []wire.Entry{{Key: []byte("product:1"), Reads: 1}}))
	f.Add(wire.AppendBatch(nil, "shop/other", []wire.Entry{{Key: []byte("k"), Writes: 1}}))
	f.Add([]byte("HS\x01\x00"))
	d := offline(f, nil, nil)
	var dec wire.Decoder
	f.Fuzz(func(t *testing.T, in []byte) {
		before := d.Stats().Batches
		d.handle(&dec, in)
		if _, err := (&wire.Decoder{}).Decode(in); err != nil && d.Stats().Batches != before {
			t.Fatal("a rejected batch was counted")
		}
	})
}

// BenchmarkIngest is decode + filter + sketch on batches of 100 entries
// from the Zipf(1.0) stream over 1M keys, as the sidecars send them.
func BenchmarkIngest(b *testing.B) {
	st := sketchtest.NewStream(1_000_000, 2_000_000, 1.0, 0.1, 42)
	var batches [][]byte
	var entries []wire.Entry
	for i, r := range st.Ranks {
		e := wire.Entry{Key: []byte(st.Keys[r]), Reads: 1, Bytes: 64}
		if st.Writes[i] {
			e.Reads, e.Writes = 0, 1
		}
		entries = append(entries, e)
		if len(entries) == 100 {
			batches = append(batches, wire.AppendBatch(nil, "shop/checkout", entries))
			entries = entries[:0]
		}
	}
	d := offline(b, []string{"product:*"}, nil)
	var dec wire.Decoder
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		d.handle(&dec, batches[i%len(batches)])
	}
	// Per CPU-second of the process as well as per wall second: on a shared
	// machine the wall clock also counts other processes' time.
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds()/1e6, "Mobs/s")
	b.ReportMetric(float64(b.N)*100/(cpuTime()-cpu).Seconds()/1e6, "Mobs/cpu-s")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
