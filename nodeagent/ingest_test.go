package nodeagent

import (
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch/sketchtest"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

const (
	node   = "node-a"
	policy = "shop/checkout"
)

// pod is the address the test's sidecar sends from; other is a pod of the
// same node injected for another policy.
var (
	pod   = netip.MustParseAddr("198.18.0.10")
	other = netip.MustParseAddr("198.18.0.11")
)

// testDirective is what the manager sends for the test policy: default
// thresholds (5,000 reads/s, 1,000 writes/s), one node.
func testDirective(include, exclude []string) *agentlink.Directive {
	return &agentlink.Directive{Policy: policy, Version: 1, Include: include, Exclude: exclude,
		ReadsPerSecond: 5000, WritesPerSecond: 1000, WindowMillis: 10_000, ReportIntervalMillis: 1000, TopK: 64,
		Floor: agentlink.Rates{Reads: 500, Writes: 100}, Alert: agentlink.Rates{Reads: 4000, Writes: 800}}
}

// offline is an agent that is never Run: enough to drive handle, with the
// policy and pods the manager would have sent.
func offline(tb testing.TB, include, exclude []string, opts ...func(*Options)) *Agent {
	tb.Helper()
	o := Options{NodeName: node, ListenAddr: "127.0.0.1:0", Manager: "127.0.0.1:1", Token: "t",
		Clock: clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))}
	for _, f := range opts {
		f(&o)
	}
	d, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.conn.Close(); d.routeLn.Close() })
	if err := d.applyDirective(testDirective(include, exclude)); err != nil {
		tb.Fatal(err)
	}
	d.sources.set([]agentlink.Pod{{IP: pod.String(), Policy: policy}, {IP: other.String(), Policy: "shop/other"}})
	return d
}

func TestHandleFilters(t *testing.T) {
	d := offline(t, []string{"product:*"}, []string{"product:secret*"})
	var dec sidecarlink.Decoder
	d.handle(&dec, pod, sidecarlink.AppendBatch(nil, policy, []sidecarlink.Entry{
		{Key: []byte("product:1"), Reads: 5}, {Key: []byte("product:secret"), Reads: 5}, {Key: []byte("session:1"), Reads: 5},
	}))
	if s := d.Stats(); s.Batches != 1 || s.Observations != 1 {
		t.Errorf("stats = %+v, want 1 batch with 1 counted entry", s)
	}
	p := d.policies[policy]
	if top := p.sk.Top(10); len(top) != 1 || top[0].Key != "product:1" {
		t.Errorf("sketch holds %+v, want only product:1", top)
	}
}

// TestHandleCountsOnlyWhatPodsMaySend: a batch is counted only from a pod the
// manager named, for the policy that pod was injected for, within its rate;
// everything else is dropped whole and counted by reason.
func TestHandleCountsOnlyWhatPodsMaySend(t *testing.T) {
	d := offline(t, nil, nil, func(o *Options) { o.SourceRate = 100 })
	batch := func(policy string, n int) []byte {
		es := make([]sidecarlink.Entry, n)
		for i := range es {
			es[i] = sidecarlink.Entry{Key: []byte{'k', byte('a' + i%26), byte('a' + i/26)}, Reads: 1}
		}
		return sidecarlink.AppendBatch(nil, policy, es)
	}
	var dec sidecarlink.Decoder
	for name, tc := range map[string]struct {
		src    netip.Addr
		policy string
		n      int
		reason string
	}{
		"from an unknown address":         {netip.MustParseAddr("198.18.0.99"), policy, 1, "unknown_source"},
		"naming another policy":           {other, policy, 1, "unentitled"},
		"over the pod's rate (burst 100)": {pod, policy, 101, "rate_limited"},
		"a known pod for its policy":      {pod, policy, 100, "accepted"},
	} {
		t.Run(name, func(t *testing.T) {
			before := counterValue(t, d, "heatsink_node_agent_batches_total", tc.reason)
			d.handle(&dec, tc.src, batch(tc.policy, tc.n))
			if got := counterValue(t, d, "heatsink_node_agent_batches_total", tc.reason) - before; got != 1 {
				t.Fatalf("batches{result=%q} grew by %v, want 1", tc.reason, got)
			}
		})
	}
	// The bucket refills with time: a second later the pod may send again.
	d.opts.Clock.(*clocktesting.FakeClock).Step(time.Second)
	before := d.Stats().Batches
	d.handle(&dec, pod, batch(policy, 100))
	if d.Stats().Batches != before+1 {
		t.Fatal("the pod's rate did not refill after a second")
	}
}

// FuzzHandle: whatever arrives on the socket, the agent does not panic and
// counts only well-formed batches.
func FuzzHandle(f *testing.F) {
	f.Add(sidecarlink.AppendBatch(nil, policy, []sidecarlink.Entry{{Key: []byte("product:1"), Reads: 1}}))
	f.Add(sidecarlink.AppendBatch(nil, "shop/other", []sidecarlink.Entry{{Key: []byte("k"), Writes: 1}}))
	f.Add([]byte("HS\x01\x00"))
	d := offline(f, nil, nil)
	var dec sidecarlink.Decoder
	f.Fuzz(func(t *testing.T, in []byte) {
		before := d.Stats().Batches
		d.handle(&dec, pod, in)
		if _, err := (&sidecarlink.Decoder{}).Decode(in); err != nil && d.Stats().Batches != before {
			t.Fatal("a rejected batch was counted")
		}
	})
}

// BenchmarkIngest is entitlement + decode + filter + sketch on batches of 100
// entries from the Zipf(1.0) stream over 1M keys, as the sidecars send them.
// BenchmarkIngest counts batches of 100 entries of a skewed stream of a
// million keys. "sized" carries each access's size (64 B to 4 KiB, so the
// top-N by size churns), "unsized" none (version 1 batches: the top-N is
// skipped); the two side by side are what keeping big keys costs.
func BenchmarkIngest(b *testing.B) {
	st := sketchtest.NewStream(1_000_000, 2_000_000, 1.0, 0.1, 42)
	for _, sized := range []bool{false, true} {
		name := "unsized"
		if sized {
			name = "sized"
		}
		b.Run(name, func(b *testing.B) {
			var batches [][]byte
			var entries []sidecarlink.Entry
			for i, r := range st.Ranks {
				e := sidecarlink.Entry{Key: []byte(st.Keys[r]), Reads: 1, Bytes: 64}
				if sized {
					e.Size = uint32(64 + (r*7919)%4032)
					e.Bytes = e.Size
				}
				if st.Writes[i] {
					e.Reads, e.Writes = 0, 1
				}
				entries = append(entries, e)
				if len(entries) == 100 {
					batches = append(batches, sidecarlink.AppendBatch(nil, policy, entries))
					entries = entries[:0]
				}
			}
			d := offline(b, []string{"product:*"}, nil, func(o *Options) { o.SourceRate = 1e12 })
			var dec sidecarlink.Decoder
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				d.handle(&dec, pod, batches[i%len(batches)])
			}
			// Per CPU-second of the process as well as per wall second: on a
			// shared machine the wall clock also counts other processes' time.
			b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds()/1e6, "Mobs/s")
			b.ReportMetric(float64(b.N)*100/(cpuTime()-cpu).Seconds()/1e6, "Mobs/cpu-s")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSummaryListsBigKeysWhateverTheirRate: a key read once with a 20 MB
// value, among many small keys read often, is first of the summary's big
// keys though it is nowhere near the floor; filtered keys are not listed.
func TestSummaryListsBigKeysWhateverTheirRate(t *testing.T) {
	d := offline(t, nil, []string{"secret:*"})
	var dec sidecarlink.Decoder
	es := []sidecarlink.Entry{
		{Key: []byte("blob"), Reads: 1, Bytes: 20 << 20, Size: 20 << 20},
		{Key: []byte("hash"), Reads: 1, Bytes: 5 << 20, Size: 5 << 20},
		{Key: []byte("secret:1"), Reads: 1, Bytes: 30 << 20, Size: 30 << 20},
	}
	for i := 0; i < 500; i++ {
		es = append(es, sidecarlink.Entry{Key: []byte("small:" + strconv.Itoa(i)), Reads: 100, Bytes: 6400, Size: 64})
	}
	d.handle(&dec, pod, sidecarlink.AppendBatch(nil, policy, es))
	s, _, _ := d.summarize(d.opts.Clock.Now())
	big := s.Policies[0].BigKeys
	if len(big) != DefaultBigKeys || big[0] != (agentlink.KeySize{Key: "blob", Bytes: 20 << 20}) || big[1] != (agentlink.KeySize{Key: "hash", Bytes: 5 << 20}) || big[2].Bytes != 64 {
		t.Fatalf("big keys = %+v", big[:min(len(big), 3)])
	}
	for _, k := range s.Policies[0].Keys {
		if k.Key == "blob" || k.Key == "hash" {
			t.Errorf("%s listed by rate too: %+v", k.Key, k)
		}
	}
}

// TestSummaryListsRefusalsSinceTheLastSent: the commands a sidecar refused
// because of a key's move are listed per key in the next summary (filtered
// keys not), summed over the batches since the last summary sent; once it
// is sent they start over, and refusals counted meanwhile are kept.
func TestSummaryListsRefusalsSinceTheLastSent(t *testing.T) {
	d := offline(t, nil, []string{"secret:*"})
	var dec sidecarlink.Decoder
	batch := func(q uint32) {
		d.handle(&dec, pod, sidecarlink.AppendBatch(nil, policy, []sidecarlink.Entry{
			{Key: []byte("queue"), Writes: 10, Refused: q},
			{Key: []byte("ok"), Writes: 10},
			{Key: []byte("secret:1"), Writes: 10, Refused: 4},
		}))
	}
	batch(3)
	batch(2)
	s, commit, _ := d.summarize(d.opts.Clock.Now())
	if got := s.Policies[0].Refused; len(got) != 1 || got[0] != (agentlink.KeyCount{Key: "queue", Count: 5}) {
		t.Fatalf("refused = %+v, want queue: 5", got)
	}
	batch(1) // between the summary and its sending
	commit()
	s, _, _ = d.summarize(d.opts.Clock.Now())
	if got := s.Policies[0].Refused; len(got) != 1 || got[0] != (agentlink.KeyCount{Key: "queue", Count: 1}) {
		t.Fatalf("refused after the summary was sent = %+v, want queue: 1", got)
	}
}

// TestSummaryListsMoveOutcomesSinceTheLastSent: the outcomes of the
// commands a key's move served, with each interval's baseline, are summed
// per key over the batches since the last summary (filtered keys not, keys
// no move served not); once it is sent they start over, and outcomes
// counted meanwhile are kept.
func TestSummaryListsMoveOutcomesSinceTheLastSent(t *testing.T) {
	d := offline(t, nil, []string{"secret:*"})
	var dec sidecarlink.Decoder
	batch := func(served, failed uint32) {
		// Every failure a read (the reads of a split counter), half the
		// direct commands reads.
		m := sidecarlink.MoveCounts{Served: served, Failed: failed, BaseTotal: 100, BaseFailed: 1,
			ReadServed: failed, ReadFailed: failed, BaseReads: 50, BaseReadsFailed: 1}
		d.handle(&dec, pod, sidecarlink.AppendBatch(nil, policy, []sidecarlink.Entry{
			{Key: []byte("split"), Writes: served, Moved: m},
			{Key: []byte("ok"), Writes: 10},
			{Key: []byte("secret:1"), Writes: 10, Moved: m},
		}))
	}
	batch(30, 3)
	batch(20, 7)
	s, commit, _ := d.summarize(d.opts.Clock.Now())
	want := agentlink.KeyMoved{Key: "split", Served: 50, Failed: 10, BaseTotal: 200, BaseFailed: 2,
		ReadServed: 10, ReadFailed: 10, BaseReads: 100, BaseReadsFailed: 2}
	if got := s.Policies[0].Moved; len(got) != 1 || got[0] != want {
		t.Fatalf("moved = %+v, want %+v", got, want)
	}
	batch(5, 1) // between the summary and its sending
	commit()
	s, _, _ = d.summarize(d.opts.Clock.Now())
	want = agentlink.KeyMoved{Key: "split", Served: 5, Failed: 1, BaseTotal: 100, BaseFailed: 1,
		ReadServed: 1, ReadFailed: 1, BaseReads: 50, BaseReadsFailed: 1}
	if got := s.Policies[0].Moved; len(got) != 1 || got[0] != want {
		t.Fatalf("moved after the summary was sent = %+v, want %+v", got, want)
	}
}

// TestCountsSurviveTheDatagramBuffersReuse: the agent reads every datagram
// into one buffer, so the keys it decodes alias it until the next. A key's
// refusals and move outcomes counted in several batches are listed once,
// under its own name, with their sums, however the buffer is reused after
// (before, the second batch's count was stored through the alias, and the
// entry's name became the bytes of whatever key the next datagram put
// there).
func TestCountsSurviveTheDatagramBuffersReuse(t *testing.T) {
	d := offline(t, nil, nil)
	var dec sidecarlink.Decoder
	buf := make([]byte, sidecarlink.MaxDatagram)
	handle := func(es ...sidecarlink.Entry) {
		n := copy(buf, sidecarlink.AppendBatch(nil, policy, es))
		d.handle(&dec, pod, buf[:n])
	}
	m := sidecarlink.MoveCounts{Served: 10, Failed: 2, BaseTotal: 100, ReadServed: 2, ReadFailed: 2, BaseReads: 50}
	for range 3 {
		handle(sidecarlink.Entry{Key: []byte("queue:jobs"), Writes: 5, Refused: 3}, sidecarlink.Entry{Key: []byte("ctr:split"), Writes: 10, Moved: m})
	}
	// Other keys of the same lengths where those were.
	handle(sidecarlink.Entry{Key: []byte("other:key1"), Writes: 1}, sidecarlink.Entry{Key: []byte("zzz:zzzzz"), Writes: 1})
	s, _, _ := d.summarize(d.opts.Clock.Now())
	if got, want := s.Policies[0].Refused, []agentlink.KeyCount{{Key: "queue:jobs", Count: 9}}; !slices.Equal(got, want) {
		t.Errorf("refused = %+v, want %+v", got, want)
	}
	want := []agentlink.KeyMoved{{Key: "ctr:split", Served: 30, Failed: 6, BaseTotal: 300, ReadServed: 6, ReadFailed: 6, BaseReads: 150}}
	if got := s.Policies[0].Moved; !slices.Equal(got, want) {
		t.Errorf("moved = %+v, want %+v", got, want)
	}
}
