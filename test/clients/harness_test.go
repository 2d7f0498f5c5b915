// Package clients drives real cluster-aware Redis client libraries through
// the sidecar: go-redis ClusterClient, redis-py RedisCluster (Debian's
// python3-redis) and ioredis Cluster (npm, pinned by hack/setup-clients.sh
// into bin/node_modules), each against a standalone Redis and a 3-master
// Redis Cluster. Pointed at the sidecar, each must keep every command on it:
// the sidecar presents itself as a one-node cluster owning every slot and
// follows MOVED/ASK itself. Each run checks, for one client:
//
//   - every SET the client sent reached Redis (INFO commandstats, summed
//     over the masters) and was seen by the sidecar (its per-key reports to
//     its node agent, read on the way there), so none went around it;
//   - the reads of one hot key are all reported to the node agent, and a
//     real node agent, from those reports, tells the manager's fleet server
//     (a real hub) that the key and a counter are over their thresholds;
//   - the counter, once a table splitting it (4 shards) is published
//     through the hub as the manager's reconciler publishes it and the
//     agent has pushed it to the sidecar, reads exact through the client
//     and through another cluster client (its count before the split in
//     the logical key plus its shards), while a reader outside the sidecar
//     sees only the count before the split.
//
// What the reconciler decides from the hub's view (split this counter) the
// test decides: the manager's decisions are tested in controllers/.
//
// In the cluster run one slot the client writes to is migrated after the
// client has loaded its slot map: the sidecar meets ASK and MOVED; the
// client must not.
package clients

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// The workload every client runs through the sidecar.
const (
	nSet  = 200 // SET <prefix>k:<i>
	nHot  = 100 // GET <prefix>hot
	nIncr = 50  // INCR <prefix>ctr, a split counter
)

// upstream is the Redis behind the sidecar.
type upstream struct {
	name    string
	cluster bool
	addrs   []string // every master
}

func upstreams(t *testing.T) []upstream {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	s := redistest.Standalone(t)
	c := redistest.Cluster(t)
	return []upstream{
		{name: "standalone", addrs: []string{s.Addr}},
		{name: "cluster", cluster: true, addrs: c.Addrs()},
	}
}

// stack is one sidecar in front of an upstream, in a simulated pod of its
// own policy, following its node agent, with what it reports to the agent.
type stack struct {
	up      upstream
	addr    string // the sidecar's client address
	metrics string // its /metrics URL
	pod     *pod
	reports *reports
}

// startSidecar serves a sidecar for up until the test ends, in a new pod
// of a new policy (name) governing the keys with prefix, reporting to and
// following the fleet's node agent, and waits until it serves under the
// routing state in force.
func startSidecar(t *testing.T, up upstream, name, prefix string) *stack {
	t.Helper()
	p := startFleet(t).newPod(t, name, up, prefix)
	tp := p.startTap(t)
	ln, hl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{
			Listener: ln, HTTPListener: hl, Upstreams: up.addrs, Cluster: up.cluster,
			Policy: p.policy, Namespace: namespace, NodeAgent: tp.addr, SourceAddr: p.ip,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar: %v", err)
		}
	})
	s := &stack{up: up, addr: ln.Addr().String(), metrics: "http://" + hl.Addr().String() + "/metrics", pod: p, reports: tp.reports}
	eventually.True(t, 30*time.Second, "the sidecar serves under the routing table in force", func() bool {
		v, _ := s.metric("heatsink_proxy_routing_in_force")
		return v == 1
	})
	return s
}

// routingVersion is the version of the table the sidecar obeys.
func (s *stack) routingVersion() int64 {
	v, _ := s.metric("heatsink_proxy_routing_version")
	return int64(v)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// metric sums the samples of name (every label set) on the sidecar's
// /metrics.
func (s *stack) metric(name string) (float64, bool) {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err == nil {
			sum, found = sum+f, true
		}
	}
	return sum, found
}

// commands is the sidecar's own count of the commands it served, by every
// path (forwarded, engine, local).
func (s *stack) commands(t *testing.T) float64 {
	t.Helper()
	v, ok := s.metric("heatsink_proxy_commands_total")
	if !ok {
		t.Fatal("the sidecar exports no heatsink_proxy_commands_total")
	}
	return v
}

// reports collects what the sidecar tells its node agent: reads and writes
// per key, decoded from the datagrams as the agent would.
type reports struct {
	mu   sync.Mutex
	keys map[string][2]uint64 // key -> reads, writes
	// moved sums the outcomes of the commands each key's move served,
	// with their baseline (counts version 5).
	moved map[string]sidecarlink.MoveCounts
}

func (r *reports) record(dec *sidecarlink.Decoder, datagram []byte) {
	b, err := dec.Decode(datagram)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range b.Entries {
		c := r.keys[string(e.Key)]
		c[0] += uint64(e.Reads)
		c[1] += uint64(e.Writes)
		r.keys[string(e.Key)] = c
		if e.Moved.Served > 0 {
			if r.moved == nil {
				r.moved = map[string]sidecarlink.MoveCounts{}
			}
			m := r.moved[string(e.Key)]
			m.Served += e.Moved.Served
			m.Failed += e.Moved.Failed
			m.BaseTotal += e.Moved.BaseTotal
			m.BaseFailed += e.Moved.BaseFailed
			r.moved[string(e.Key)] = m
		}
	}
}

// movedOf is what the sidecar reported of the commands key's move served.
func (r *reports) movedOf(key string) sidecarlink.MoveCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.moved[key]
}

// sum is the reads and writes reported for the keys with prefix.
func (r *reports) sum(prefix string) (reads, writes uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.keys {
		if strings.HasPrefix(k, prefix) {
			reads += c[0]
			writes += c[1]
		}
	}
	return reads, writes
}

// commandCalls sums cmdstat_<cmd>'s calls over every master.
func commandCalls(t *testing.T, addrs []string, cmd string) int64 {
	t.Helper()
	var total int64
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.Info(context.Background(), "commandstats").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			total += n
		}
	}
	return total
}

// client is one client library's run: start connects to addr and loads
// the slot map (it returns when the client is ready); work then plays the
// workload with prefix and returns what GET <prefix>ctr answered; incr
// reads <prefix>hot nHot times and increments <prefix>ctr nIncr times
// more, and returns what GET <prefix>ctr answers.
type client interface {
	start(t *testing.T, addr, prefix string)
	work(t *testing.T) string
	incr(t *testing.T) string
}

// play runs c through a sidecar in front of every upstream and checks that
// every command went through the sidecar, that the node agent detected the
// hot key and the hot counter from the sidecar's counts, and that the
// counter, once the manager's fleet server has published its split and the
// agent has pushed it to the sidecar, reads exact through the client.
func play(t *testing.T, name string, newClient func() client) {
	for _, up := range upstreams(t) {
		t.Run(up.name, func(t *testing.T) {
			prefix := name + ":"
			s := startSidecar(t, up, name+"-"+up.name, prefix)
			c := newClient()
			c.start(t, s.addr, prefix)
			if up.cluster {
				// The client holds its slot map: a slot it writes to moves
				// now, so the sidecar meets ASK and then MOVED. (The slot
				// needs a key to move; it is written directly.)
				direct(t, up, func(c redis.UniversalClient) error { return c.Set(context.Background(), prefix+"k:0", "v", 0).Err() })
				redistest.MigrateSlot(t, up.addrs, int(routing.Slot(prefix+"k:0")))
			}
			setsBefore := commandCalls(t, up.addrs, "set")
			cmdsBefore := s.commands(t)
			got := c.work(t)
			sets := commandCalls(t, up.addrs, "set") - setsBefore
			cmds := s.commands(t) - cmdsBefore

			// Every SET reached Redis exactly once...
			if sets != nSet {
				t.Errorf("Redis counted %d SETs, the client sent %d", sets, nSet)
			}
			// ...and the sidecar saw each: its reports to the node agent
			// arrive within its flush interval (100ms).
			var reads, writes uint64
			err := eventually.Poll(context.Background(), 10*time.Second, func() error {
				_, writes = s.reports.sum(prefix + "k:")
				reads, _ = s.reports.sum(prefix + "hot")
				if writes < nSet || reads < nHot {
					return fmt.Errorf("not yet")
				}
				return nil
			})
			t.Logf("%s via the sidecar, %s upstream: %d of %d SETs reported by the sidecar (%.2f), %d of %d hot-key reads, %v commands counted by the sidecar for %d sent",
				name, up.name, writes, nSet, float64(writes)/nSet, reads, nHot, cmds, nSet+nHot+nIncr+1)
			if err != nil || writes != nSet || reads != nHot {
				t.Errorf("the sidecar reported %d of %d SETs and %d of %d reads of the hot key: commands went around it", writes, nSet, reads, nHot)
			}
			if cmds < nSet+nHot+nIncr+1 {
				t.Errorf("the sidecar counted %v commands; the client sent %d", cmds, nSet+nHot+nIncr+1)
			}
			if got != strconv.Itoa(nIncr) {
				t.Errorf("the counter read %q through the client before its split; want %d", got, nIncr)
			}
			if up.cluster {
				// The migrated slot's key was met: the sidecar followed the
				// redirection (the client, holding only the sidecar, could
				// not have).
				if n, _ := s.metric("heatsink_proxy_redirects_total"); n < 1 {
					t.Errorf("the sidecar followed %v redirections; the migrated slot should have given one", n)
				}
			}

			// The client keeps the hot key and the counter hot (rounds of
			// nHot GETs and nIncr INCRs) until the manager, from the node
			// agent's summaries of the sidecar's counts, reports both over
			// their thresholds, splits the counter, the table reaches the
			// sidecar through the node agent, and its split generation is in
			// force (its first epoch has begun).
			total, rounds := nIncr, 0
			var hot, ctr int64
			var hotSeen, ctrSeen bool
			var split *routing.Generation
			var epochMs int64
			deadline := time.Now().Add(90 * time.Second)
			// Ten rounds a second at most: far over the thresholds, and
			// frugal on a shared machine.
			pace := time.NewTicker(100 * time.Millisecond)
			defer pace.Stop()
			for {
				if !hotSeen {
					hot, hotSeen = s.pod.reported(t, prefix+"hot", false)
				}
				if !ctrSeen {
					ctr, ctrSeen = s.pod.reported(t, prefix+"ctr", true)
				}
				if split == nil {
					if tbl := s.pod.table(t); tbl != nil && s.routingVersion() >= tbl.Version {
						if e := tbl.Lookup(prefix + "ctr"); e != nil && e.Split != nil && len(e.Split.Generations) > 0 {
							g := e.Split.Generations[len(e.Split.Generations)-1]
							split, epochMs = &g, tbl.EpochMillis
						}
					}
				}
				if hotSeen && ctrSeen && split != nil && routing.EpochAt(time.Now(), epochMs) > split.FromEpoch {
					break // its first epoch is under way: the next round is split
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %d rounds: hot key reported %v (%d/s), counter reported %v (%d/s), split %+v", rounds, hotSeen, hot, ctrSeen, ctr, split)
				}
				<-pace.C
				got = c.incr(t)
				total += nIncr
				rounds++
				if got != strconv.Itoa(total) {
					t.Fatalf("the counter read %q through the client after %d increments", got, total)
				}
			}
			t.Logf("reported by the manager from the node agent's summaries: %shot at %d reads/s (threshold %d), %sctr at %d writes/s (threshold %d)",
				prefix, hot, readThreshold, prefix, ctr, writeThreshold)
			got = c.incr(t)
			total += nIncr
			t.Logf("the manager split %sctr in %d shards from epoch %d after %d more rounds of %d INCRs", prefix, split.Shards, split.FromEpoch, rounds, nIncr)
			if got != strconv.Itoa(total) {
				t.Errorf("the split counter read %q through the client; want %d", got, total)
			}
			// Another cluster client of the sidecar reads the same total.
			other := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr}})
			v, err := other.Get(context.Background(), prefix+"ctr").Result()
			other.Close()
			if v != strconv.Itoa(total) {
				t.Errorf("go-redis ClusterClient read the split counter through the sidecar as %q (%v); want %d", v, err, total)
			}
			// A reader outside the sidecar reads the logical key alone: the
			// last round's counts are in the shards.
			direct, _ := strconv.Atoi(directGet(t, up, prefix+"ctr"))
			t.Logf("the split counter read %s through the client and %s through another cluster client for %d INCRs; a direct GET %d", got, v, total, direct)
			if direct > total-nIncr {
				t.Errorf("a direct GET of the split counter read %d of %d: the last %d increments should be in its shards", direct, total, nIncr)
			}
		})
	}
}

// direct runs f with a client of Redis itself, not of the sidecar.
func direct(t *testing.T, up upstream, f func(redis.UniversalClient) error) {
	t.Helper()
	var c redis.UniversalClient
	if up.cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: up.addrs})
	} else {
		c = redis.NewClient(&redis.Options{Addr: up.addrs[0]})
	}
	defer c.Close()
	if err := f(c); err != nil {
		t.Fatal(err)
	}
}

// directGet reads key from Redis, not through the sidecar ("" for none).
func directGet(t *testing.T, up upstream, key string) (v string) {
	t.Helper()
	direct(t, up, func(c redis.UniversalClient) error {
		var err error
		if v, err = c.Get(context.Background(), key).Result(); err == redis.Nil {
			err = nil
		}
		return err
	})
	return v
}

// script runs an external client (python3, node) speaking a line protocol
// on stdio: it prints "ready" once connected; then, for the line "go", runs
// the workload and prints GET ctr's answer, for "incr" reads hot nHot
// times, increments ctr nIncr times and prints GET ctr's answer.
type script struct {
	argv []string
	env  []string
	out  *bufio.Reader
	in   io.WriteCloser
	wait func() error
	errb *strings.Builder
}

func (s *script) start(t *testing.T, addr, prefix string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, s.argv[0], append(s.argv[1:], host, port, prefix,
		strconv.Itoa(nSet), strconv.Itoa(nHot), strconv.Itoa(nIncr))...)
	cmd.Env = append(os.Environ(), s.env...)
	s.errb = &strings.Builder{}
	cmd.Stderr = s.errb
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.in, s.out, s.wait = in, bufio.NewReader(out), cmd.Wait
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	if line := s.line(t); line != "ready" {
		t.Fatalf("%s: %q before ready", s.argv[0], line)
	}
}

func (s *script) line(t *testing.T) string {
	t.Helper()
	l, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v; stderr:\n%s", strings.Join(s.argv, " "), err, s.errb.String())
	}
	return strings.TrimSpace(l)
}

func (s *script) work(t *testing.T) string { t.Helper(); return s.ask(t, "go") }
func (s *script) incr(t *testing.T) string { t.Helper(); return s.ask(t, "incr") }

// ask sends the script one command line and returns its answer.
func (s *script) ask(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := io.WriteString(s.in, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
	return s.line(t)
}
