package main

import (
	"bufio"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

func TestParseFlags(t *testing.T) {
	fleet := []string{"--manager-fleet", "127.0.0.1:9443", "--token", "t"}
	tests := map[string]struct {
		args    []string
		wantErr []string // substrings of the error, all of them
		check   func(t *testing.T, c simproto.Config, o *options)
	}{
		"defaults with the manager": {
			args: fleet,
			check: func(t *testing.T, c simproto.Config, o *options) {
				if o.transport != transportDirect || o.startRate != 500 || o.follow {
					t.Errorf("options = %+v, want direct, 500/s, not --follow", *o)
				}
				if c.ManagerFleet != "127.0.0.1:9443" || c.Token != "t" {
					t.Errorf("config: manager %q token %q", c.ManagerFleet, c.Token)
				}
			},
		},
		"the orchestrator's arguments": {
			args: func() []string {
				c := simproto.Defaults()
				c.Nodes, c.ManagerFleet, c.Token = 1000, "127.0.0.1:1", "secret"
				return c.Args()
			}(),
			check: func(t *testing.T, c simproto.Config, _ *options) {
				if c.Nodes != 1000 || c.Sidecars() != 10000 {
					t.Errorf("nodes %d sidecars %d", c.Nodes, c.Sidecars())
				}
			},
		},
		"no manager, no token": {args: nil, wantErr: []string{"--manager-fleet", "--token"}},
		"the follower child needs neither": {
			args: []string{"--follow"},
			check: func(t *testing.T, _ simproto.Config, o *options) {
				if !o.follow {
					t.Error("follow not set")
				}
			},
		},
		"bad transport and rate, and a bad simproto flag, at once": {
			args:    append([]string{"--transport", "tcp", "--start-rate", "0", "--nodes", "0"}, fleet...),
			wantErr: []string{"--transport", "--start-rate", "--nodes"},
		},
		"udp": {
			args: append([]string{"--transport", "udp"}, fleet...),
			check: func(t *testing.T, _ simproto.Config, o *options) {
				if o.transport != transportUDP {
					t.Errorf("transport %q", o.transport)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, o, err := parseFlags(tc.args)
			if (err != nil) != (len(tc.wantErr) > 0) {
				t.Fatalf("parseFlags() error = %v, want error %v", err, tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
			if tc.check != nil {
				tc.check(t, c, o)
			}
		})
	}
}

func TestDescriptorsNeeded(t *testing.T) {
	c := simproto.Defaults()
	c.Nodes = 1000
	// The agents' sockets and their ends of 10,000 long polls fit under
	// 20,000; a UDP socket per sidecar more does not.
	if got := descriptorsNeeded(c, transportDirect); got > 20000 {
		t.Errorf("direct at 1,000 nodes: %d descriptors, want under 20,000", got)
	}
	if got := descriptorsNeeded(c, transportUDP); got <= 20000 {
		t.Errorf("udp at 1,000 nodes: %d descriptors, want over 20,000", got)
	}
}

// decoded is a batch as the agent's decoder reads it.
type decoded struct {
	src    netip.Addr
	policy string
	ents   map[string][3]uint32
}

func decodeAll(t *testing.T, c *counter) []decoded {
	t.Helper()
	var out []decoded
	var dec sidecarlink.Decoder
	buf := make([]byte, 0, maxDatagram)
	c.flush(buf, func(src netip.Addr, b []byte) {
		if len(b) > maxDatagram {
			t.Errorf("batch of %d bytes, over %d", len(b), maxDatagram)
		}
		batch, err := dec.Decode(b)
		if err != nil {
			t.Fatalf("the agent's decoder refuses the batch: %v", err)
		}
		d := decoded{src: src, policy: string(batch.Policy), ents: map[string][3]uint32{}}
		for _, e := range batch.Entries {
			d.ents[string(e.Key)] = [3]uint32{e.Reads, e.Writes, e.Bytes}
		}
		out = append(out, d)
	})
	return out
}

func TestCounterAggregatesAndEncodes(t *testing.T) {
	src := netip.MustParseAddr(simproto.SidecarIP(3, 4))
	c := newCounter(src, 100)
	c.Observe("fleet/catalogue", "product:viral", 3, 0, 1536)
	c.Observe("fleet/catalogue", "product:viral", 2, 0, 1024)
	c.Observe("fleet/catalogue", "likes:counter", 0, 5, 40)
	c.Observe("fleet/other", "bg:1", 1, 0, 100)
	c.Observe("fleet/catalogue", "", 1, 0, 1)                                           // empty key: dropped
	c.Observe("fleet/catalogue", strings.Repeat("k", sidecarlink.MaxKeyLen+1), 1, 0, 1) // too long: dropped
	got := decodeAll(t, c)
	want := []decoded{
		{src: src, policy: "fleet/catalogue", ents: map[string][3]uint32{"product:viral": {5, 0, 2560}, "likes:counter": {0, 5, 40}}},
		{src: src, policy: "fleet/other", ents: map[string][3]uint32{"bg:1": {1, 0, 100}}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(decoded{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	if o, d := c.stats(); o != 4 || d != 2 {
		t.Errorf("stats: observed %d dropped %d, want 4 and 2", o, d)
	}
	if again := decodeAll(t, c); len(again) != 0 {
		t.Errorf("a second flush sent %d batches, want none (counts are sent once)", len(again))
	}
}

func TestCounterSplitsBatchesAndBoundsKeys(t *testing.T) {
	c := newCounter(netip.MustParseAddr("127.0.1.1"), 500)
	for i := range 600 {
		c.Observe("fleet/catalogue", "bg:"+strings.Repeat("x", 20)+string(rune('a'+i%26))+strings.Repeat("y", i/26), 1, 0, 100)
	}
	batches := decodeAll(t, c)
	if len(batches) < 2 {
		t.Fatalf("%d batches for 500 keys of ~25 bytes, want several of at most %d bytes", len(batches), maxDatagram)
	}
	keys := 0
	for _, b := range batches {
		keys += len(b.ents)
	}
	if keys != 500 {
		t.Errorf("%d keys sent, want the 500 the bound keeps", keys)
	}
	if o, d := c.stats(); o != 500 || d != 100 {
		t.Errorf("stats: observed %d dropped %d, want 500 and 100", o, d)
	}
}

func counterFamily(name string, byResult map[string]float64) *dto.MetricFamily {
	mf := &dto.MetricFamily{Name: proto.String(name), Type: dto.MetricType_COUNTER.Enum()}
	for r, v := range byResult {
		m := &dto.Metric{Counter: &dto.Counter{Value: proto.Float64(v)}}
		if r != "" {
			m.Label = []*dto.LabelPair{{Name: proto.String("result"), Value: proto.String(r)}}
		}
		mf.Metric = append(mf.Metric, m)
	}
	return mf
}

func TestAgentCounters(t *testing.T) {
	fams := []*dto.MetricFamily{
		counterFamily("heatsink_node_agent_batches_total", map[string]float64{"accepted": 90, "unknown_source": 3, "rate_limited": 2}),
		counterFamily("heatsink_node_agent_summaries_total", map[string]float64{"sent": 30, "superseded": 1, "no_manager": 4, "error": 1}),
		counterFamily("heatsink_node_agent_manager_connects_total", map[string]float64{"": 2}),
		counterFamily("heatsink_node_agent_routing_requests_total", map[string]float64{"served": 20, "unentitled": 1}),
		counterFamily("heatsink_node_agent_observations_total", map[string]float64{"counted": 1000}), // not a done counter
	}
	got := map[string]float64{"agent_batches_accepted": 10} // a second agent's, summed
	agentCounters(fams, got)
	want := map[string]float64{
		"agent_batches_accepted": 100, "datagrams_refused_unknown_source": 3, "datagrams_refused_rate_limited": 2,
		"agent_summaries_sent": 30, "agent_summaries_superseded": 1, "agent_summaries_lost_no_manager": 4, "agent_summaries_lost_error": 1,
		"agent_stream_connects":   2,
		"routing_requests_served": 20, "routing_requests_refused_unentitled": 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agentCounters (-want +got):\n%s", diff)
	}
}

func TestReadAddrs(t *testing.T) {
	got, err := readAddrs(bufio.NewReader(strings.NewReader("127.0.1.254:4000\n 127.0.2.254:4001 \n")), 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"127.0.1.254:4000", "127.0.2.254:4001"}, got); diff != "" {
		t.Errorf("readAddrs (-want +got):\n%s", diff)
	}
	if _, err := readAddrs(bufio.NewReader(strings.NewReader("127.0.1.254:4000\n")), 2); err == nil {
		t.Error("one address for two nodes: want an error")
	}
	if _, err := readAddrs(bufio.NewReader(strings.NewReader("127.0.1.254\n")), 1); err == nil {
		t.Error("an address without a port: want an error")
	}
}

// TestNodeTickIsTheFlushInterval: the node simulator hands each node's
// batches to its agent after each traffic tick (flusher), so the tick must
// be a wire client's flush interval for the batches to look like a real
// sidecar's.
func TestNodeTickIsTheFlushInterval(t *testing.T) {
	if simproto.NodeTick != sidecarlink.FlushInterval {
		t.Fatalf("simproto.NodeTick %s, sidecarlink.FlushInterval %s", simproto.NodeTick, sidecarlink.FlushInterval)
	}
}

// TestNodeTickIsTheAgentsTick: each node ticks its agent (made with
// nodeagent.Options.ExternalTicks) once per traffic tick, so the tick must
// be the agent's own for its summaries to go as a real agent's do.
func TestNodeTickIsTheAgentsTick(t *testing.T) {
	if simproto.NodeTick != nodeagent.DefaultTick {
		t.Fatalf("simproto.NodeTick %s, nodeagent.DefaultTick %s", simproto.NodeTick, nodeagent.DefaultTick)
	}
}

// TestCounterReusesItsEntriesAcrossFlushes: a sidecar's entries slice is
// reused from one flush to the next; what a tick counted is sent once, and
// the next tick's counts alone follow.
func TestCounterReusesItsEntriesAcrossFlushes(t *testing.T) {
	src := netip.MustParseAddr(simproto.SidecarIP(0, 1))
	c := newCounter(src, 100)
	for tick := range 3 {
		c.Observe("fleet/catalogue", "product:viral", uint32(tick+1), 0, 512)
		if tick == 0 {
			c.Observe("fleet/catalogue", "bg:1", 1, 0, 100)
		}
		got := decodeAll(t, c)
		want := map[string][3]uint32{"product:viral": {uint32(tick + 1), 0, 512}}
		if tick == 0 {
			want["bg:1"] = [3]uint32{1, 0, 100}
		}
		if len(got) != 1 || !cmp.Equal(got[0].ents, want) {
			t.Fatalf("tick %d: batches %+v, want one with %v", tick, got, want)
		}
	}
}
