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
//     the node agent address, read here off the UDP socket), so none went
//     around it;
//   - the reads of one hot key are all reported to the node agent (what
//     its detection counts);
//   - a split counter (routing table entry with 4 shards) incremented
//     through the client reads back exact, while a reader outside the
//     sidecar sees no value under the logical key.
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
	"path/filepath"
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

// stack is one sidecar in front of an upstream, with the socket its
// per-key reports go to.
type stack struct {
	up      upstream
	addr    string // the sidecar's client address
	metrics string // its /metrics URL
	reports *reports
}

// startSidecar serves a sidecar for up until the test ends, following a
// routing table that splits prefix+"ctr" in 4 shards, and waits until it
// obeys that table.
func startSidecar(t *testing.T, up upstream, prefix string) *stack {
	t.Helper()
	table := fmt.Sprintf(`{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[
		{"key":%q,"source":"detected","split":{"generations":[{"fromEpoch":0,"shards":4}]}}]}`, prefix+"ctr")
	file := filepath.Join(t.TempDir(), "routing.json")
	if err := os.WriteFile(file, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := listenReports(t)
	ln, hl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{
			Listener: ln, HTTPListener: hl, Upstreams: up.addrs, Cluster: up.cluster,
			Policy: "p", Namespace: "ns", RoutingFile: file, NodeAgent: rep.addr,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar: %v", err)
		}
	})
	s := &stack{up: up, addr: ln.Addr().String(), metrics: "http://" + hl.Addr().String() + "/metrics", reports: rep}
	eventually.True(t, 10*time.Second, "the sidecar obeys the routing table", func() bool {
		v, _ := s.metric("heatsink_proxy_routing_version")
		return v == 1
	})
	return s
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
	addr string
	mu   sync.Mutex
	keys map[string][2]uint64 // key -> reads, writes
}

func listenReports(t *testing.T) *reports {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &reports{addr: pc.LocalAddr().String(), keys: map[string][2]uint64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var dec sidecarlink.Decoder
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			b, err := dec.Decode(buf[:n])
			if err != nil {
				continue
			}
			r.mu.Lock()
			for _, e := range b.Entries {
				c := r.keys[string(e.Key)]
				c[0] += uint64(e.Reads)
				c[1] += uint64(e.Writes)
				r.keys[string(e.Key)] = c
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return r
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
// workload with prefix and returns what GET <prefix>ctr answered.
type client interface {
	start(t *testing.T, addr, prefix string)
	work(t *testing.T) string
}

// play runs c through a sidecar in front of every upstream and checks that
// every command went through the sidecar.
func play(t *testing.T, name string, newClient func() client) {
	for _, up := range upstreams(t) {
		t.Run(up.name, func(t *testing.T) {
			prefix := name + ":"
			s := startSidecar(t, up, prefix)
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
				t.Errorf("the split counter read %q through the client; want %d", got, nIncr)
			}
			if up.cluster {
				// The migrated slot's key was met: the sidecar followed the
				// redirection (the client, holding only the sidecar, could
				// not have).
				if n, _ := s.metric("heatsink_proxy_redirects_total"); n < 1 {
					t.Errorf("the sidecar followed %v redirections; the migrated slot should have given one", n)
				}
			}
			// A reader outside the sidecar sees no value under the logical
			// key: the counts are in its shards.
			if v := directGet(t, up, prefix+"ctr"); v != "" {
				t.Errorf("a direct GET of the split counter read %q; its value is in the shards", v)
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
// on stdio: it prints "ready" once connected, waits for a line, runs the
// workload and prints GET ctr's answer.
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

func (s *script) work(t *testing.T) string {
	t.Helper()
	if _, err := io.WriteString(s.in, "go\n"); err != nil {
		t.Fatal(err)
	}
	return s.line(t)
}
