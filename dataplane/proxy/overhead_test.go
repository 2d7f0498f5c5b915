package proxy_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// overheadEvery is the proxy's sampling period of
// heatsink_proxy_command_overhead_seconds (one forwarded command in 64).
const overheadEvery = 64

// histogram returns the count and sum of a histogram without labels, and
// its label names (there must be none: no key, no client).
func histogram(t *testing.T, g prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 {
			t.Fatalf("%s: %d series, labels %v; want one series without labels", name, len(mf.GetMetric()), mf.GetMetric()[0].GetLabel())
		}
		h := mf.GetMetric()[0].GetHistogram()
		return h.GetSampleCount(), h.GetSampleSum()
	}
	t.Fatalf("%s not registered", name)
	return 0, 0
}

// timedClient sends commands on one connection and times each round trip.
type timedClient struct {
	c   net.Conn
	r   *resp.Reader
	rep resp.Reply
}

func dialTimed(t *testing.T, addr string) *timedClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a bound
	return &timedClient{c: c, r: resp.NewReader(bufio.NewReader(c), 4096, resp.DefaultLimits())}
}

// pipeline writes cmds in one write, reads their replies and returns the
// time from before the write to the last reply.
func (rc *timedClient) pipeline(t *testing.T, cmds []byte, n int) time.Duration {
	t.Helper()
	t0 := time.Now()
	if _, err := rc.c.Write(cmds); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := rc.r.ReadReply(&rc.rep); err != nil {
			t.Fatal(err)
		}
		if rc.rep.IsError() {
			t.Fatalf("reply %q", rc.rep.Line)
		}
	}
	return time.Since(t0)
}

// TestCommandOverheadSampled sends commands one at a time through the
// event loop to a real Redis: one in 64 is sampled, and the proxy's own
// time of the sampled ones is positive and below what the client measured
// for those very commands (which adds Redis' and the network's time).
func TestCommandOverheadSampled(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Registerer: reg})
	rc := dialTimed(t, addr)

	const n = 1000
	var sampledRTT, allRTT time.Duration
	for i := range n {
		cmd := resp.AppendArgs(nil, [][]byte{[]byte("SET"), fmt.Appendf(nil, "k:%d", i), []byte("v")})
		if i%2 == 1 {
			cmd = resp.AppendArgs(nil, [][]byte{[]byte("GET"), fmt.Appendf(nil, "k:%d", i-1)})
		}
		d := rc.pipeline(t, cmd, 1)
		allRTT += d
		// The loop's first forwarded command is sampled, then every 64th
		// after the last sample ended; one command at a time, each sample
		// ends (its reply written) before the next command is read.
		if i%overheadEvery == 0 {
			sampledRTT += d
		}
	}
	want := uint64((n-1)/overheadEvery + 1)
	var count uint64
	var sum float64
	// The loop observes a sample just after writing its reply, so the
	// last one may land a moment after the client read it.
	eventually.True(t, 5*time.Second, "every sample observed", func() bool {
		count, sum = histogram(t, reg, "heatsink_proxy_command_overhead_seconds")
		return count >= want
	})
	if count != want {
		t.Fatalf("count = %d after %d sequential commands, want %d (one in %d)", count, n, want, overheadEvery)
	}
	if sum <= 0 || sum >= sampledRTT.Seconds() {
		t.Fatalf("sum = %v s; want positive and below the client-measured %v of the %d sampled commands (all %d: %v)", sum, sampledRTT, want, n, allRTT)
	}
	t.Logf("%d samples: proxy's own time %.1f µs mean; client round trip of those %.1f µs mean", count, sum/float64(count)*1e6, sampledRTT.Seconds()/float64(count)*1e6)
}

// TestCommandOverheadPipelined sends pipelines of 16: the sample is the
// first command of a read, and its time (parsing the 15 after it included)
// stays below the pipeline's round trip. Commands served by a session
// (here MULTI/EXEC, which hands the client over) are not sampled.
func TestCommandOverheadPipelined(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Registerer: reg})
	rc := dialTimed(t, addr)

	const batches, depth = 200, 16
	var batch []byte
	for j := range depth {
		batch = resp.AppendArgs(batch, [][]byte{[]byte("INCR"), fmt.Appendf(nil, "c:%d", j)})
	}
	var total time.Duration
	for range batches {
		total += rc.pipeline(t, batch, depth)
	}
	// A sample is armed after 64 commands were forwarded since the last one
	// ended and taken at the next read: between one in 64 and one in 64+16.
	lo, hi := uint64(batches*depth/(overheadEvery+depth)), uint64(batches*depth/overheadEvery+1)
	var count uint64
	var sum float64
	eventually.True(t, 5*time.Second, "the samples observed", func() bool {
		count, sum = histogram(t, reg, "heatsink_proxy_command_overhead_seconds")
		return count >= lo
	})
	if count > hi {
		t.Fatalf("count = %d after %d pipelines of %d, want %d..%d", count, batches, depth, lo, hi)
	}
	if sum <= 0 || sum >= total.Seconds() {
		t.Fatalf("sum = %v s; want positive and below the client-measured total %v", sum, total)
	}

	// A session serves the client from MULTI on: no sample.
	before, _ := histogram(t, reg, "heatsink_proxy_command_overhead_seconds")
	var tx []byte
	tx = resp.AppendArgs(tx, [][]byte{[]byte("MULTI")})
	for range overheadEvery * 2 {
		tx = resp.AppendArgs(tx, [][]byte{[]byte("INCR"), []byte("t")})
	}
	tx = resp.AppendArgs(tx, [][]byte{[]byte("EXEC")})
	rc.pipeline(t, tx, overheadEvery*2+2)
	for range overheadEvery * 2 {
		rc.pipeline(t, resp.AppendArgs(nil, [][]byte{[]byte("GET"), []byte("t")}), 1)
	}
	if after, _ := histogram(t, reg, "heatsink_proxy_command_overhead_seconds"); after != before {
		t.Fatalf("count went from %d to %d while a session served the client", before, after)
	}
}
