package sidecar_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// splitTable splits the counter "likes" over 4 shards from epoch 0.
const splitTable = `{"schemaVersion":1,"policy":"ns/p","version":%d,"epochMillis":60000,"entries":[
	{"key":"likes","source":"detected","split":{"generations":[{"fromEpoch":0,"shards":4}]}}]}`

// seedSplitCounter stores "likes" as a split counter would hold it: 10 in
// the base key and 5 in each of its 4 shards, 30 in all. A sidecar under
// the table reads 30; one without it reads the base key alone, 10.
func seedSplitCounter(t *testing.T, addr string) *redis.Client {
	t.Helper()
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { direct.Close() })
	reseed(t, direct)
	return direct
}

func reseed(t *testing.T, direct *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := direct.Set(ctx, "likes", 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range routing.ShardKeys("likes", routing.Generation{FromEpoch: 0, Shards: 4}) {
		if err := direct.Set(ctx, k, 5, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// fleet is a real hub (the manager's end) and one real node agent, the
// sidecar's pod being 127.0.0.1; the agent holds no table until publish.
type fleet struct {
	hub   *hub.Hub
	agent string
	reg   *prometheus.Registry // the agent's metrics
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := startFleetUnnamed(t)
	f.hub.UpsertPod("ns/app-0", "node-a", agentlink.Pod{IP: "127.0.0.1", Policy: "ns/p"})
	return f
}

// startFleetUnnamed is startFleet before the manager has named the pod
// to its agent, which refuses it meanwhile (403), as at a real pod's start.
func startFleetUnnamed(t *testing.T) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.Start(ctx) }()
	addr, err := h.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec := &v1alpha1.HotKeyPolicySpec{}
	v1alpha1.SetDefaults(spec)
	h.SetPolicy("ns/p", hub.ParamsFromSpec(spec))
	reg := prometheus.NewRegistry()
	d, err := nodeagent.New(nodeagent.Options{NodeName: "node-a", ListenAddr: "127.0.0.1:0", Manager: addr, Token: "t0ken", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, 20*time.Second, "the agent connects to the manager", func() bool { return d.Stats().Connected })
	return &fleet{hub: h, agent: d.RoutingAddr().String(), reg: reg}
}

// refusals counts the routing requests the agent refused.
func (f *fleet) refusals(t *testing.T) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "heatsink_node_agent_routing_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() != "served" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func (f *fleet) publish(version int64) {
	f.hub.SetRouting("ns/p", version, []byte(fmt.Sprintf(splitTable, version)), []string{"likes"})
}

// started is a sidecar under test and when Run was called.
type started struct {
	addr, http string
	begun      time.Time
}

func startSidecar(t *testing.T, cfg sidecar.Config) *started {
	t.Helper()
	ln, hl := listen(t), listen(t)
	cfg.Listener, cfg.HTTPListener, cfg.Policy, cfg.Namespace = ln, hl, "p", "ns"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := &started{addr: ln.Addr().String(), http: "http://" + hl.Addr().String(), begun: time.Now()}
	go func() { done <- sidecar.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// waitStarted polls /startupz as the kubelet does (but every 10 ms) until
// it answers 200, and returns its body and the time since Run.
func (s *started) waitStarted(t *testing.T) (string, time.Duration) {
	t.Helper()
	var body string
	eventually.True(t, 30*time.Second, "/startupz answers 200", func() bool {
		var code int
		code, body = get(t, s.http+"/startupz")
		return code == 200
	})
	return body, time.Since(s.begun)
}

func (s *started) metric(t *testing.T, name string) float64 {
	t.Helper()
	_, m := get(t, s.http+"/metrics")
	v, ok := metricValue(m, name)
	if !ok {
		t.Fatalf("/metrics lacks %s", name)
	}
	return v
}

// heldPipeline connects to the sidecar and sends GET likes, INCR likes at
// once, as an application does when its sidecar is (re)started under it,
// and returns the replies when they come.
func heldPipeline(t *testing.T, addr string) <-chan []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("*2\r\n$3\r\nGET\r\n$5\r\nlikes\r\n*2\r\n$4\r\nINCR\r\n$5\r\nlikes\r\n")); err != nil {
		t.Fatal(err)
	}
	out := make(chan []string, 1)
	go func() {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		r := bufio.NewReader(c)
		var got []string
		for len(got) < 2 {
			line, err := r.ReadString('\n')
			if err != nil {
				got = append(got, "error: "+err.Error())
				break
			}
			if strings.HasPrefix(line, "$") { // a bulk string: its content follows
				if line, err = r.ReadString('\n'); err != nil {
					got = append(got, "error: "+err.Error())
					break
				}
			}
			got = append(got, strings.TrimSpace(line))
		}
		out <- got
	}()
	return out
}

func checkHeld(t *testing.T, replies <-chan []string, direct *redis.Client) {
	t.Helper()
	select {
	case got := <-replies:
		if strings.Join(got, " ") != "30 :31" {
			t.Fatalf("held GET, INCR of the split counter = %q, want [30 :31]: served before the table was in force", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held commands were never answered")
	}
	if v := direct.Get(context.Background(), "likes").Val(); v != "10" {
		t.Fatalf("base key = %q after the held INCR, want 10 (the increment goes to a shard)", v)
	}
}

// TestNewSidecarServesOnlyUnderTheTableInForce: a sidecar starting while
// its node agent serves nothing (it holds no table) and its routing file
// does not exist yet holds its clients: /startupz answers 503 and a
// pipeline sent meanwhile is answered only once the file's table is in
// force (the split counter's full count, never its base key alone); then
// /startupz answers 200.
func TestNewSidecarServesOnlyUnderTheTableInForce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	direct := seedSplitCounter(t, srv.Addr)
	f := startFleet(t)
	file := filepath.Join(t.TempDir(), routing.ConfigMapKey)
	s := startSidecar(t, sidecar.Config{Upstreams: []string{srv.Addr}, NodeAgent: f.agent, RoutingFile: file, StartupWait: time.Minute})

	code, body := get(t, s.http+"/startupz")
	if code != 503 || !strings.Contains(body, "waiting for the routing table") {
		t.Fatalf("/startupz before any table: %d %q, want 503", code, body)
	}
	replies := heldPipeline(t, s.addr)
	// Still nothing in force: the agent has no table, the file is absent
	// and not in a volume the kubelet wrote.
	if code, body = get(t, s.http+"/startupz"); code != 503 {
		t.Fatalf("/startupz with nothing in force: %d %q", code, body)
	}
	if v := s.metric(t, "heatsink_proxy_routing_in_force"); v != 0 {
		t.Fatalf("heatsink_proxy_routing_in_force = %v before any table", v)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf(splitTable, 3)), 0o644); err != nil {
		t.Fatal(err)
	}
	appeared := time.Now()
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	body, _ = s.waitStarted(t)
	t.Logf("/startupz 200 %s after the file appeared (the file is polled every second)", time.Since(appeared).Round(time.Millisecond))
	if !strings.Contains(body, "in force from the mounted file") {
		t.Fatalf("/startupz = %q, want in force from the file", body)
	}
	checkHeld(t, replies, direct)
	if v := s.metric(t, "heatsink_proxy_serving_unmitigated"); v != 0 {
		t.Fatalf("heatsink_proxy_serving_unmitigated = %v under a table", v)
	}
}

// TestNewSidecarStartsOnItsNodeAgentsFirstFrame: with its node agent
// holding the table, a new sidecar is in force on the stream's first frame
// and serves the held pipeline under it; the time from Run to /startupz
// 200 is logged.
func TestNewSidecarStartsOnItsNodeAgentsFirstFrame(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	direct := seedSplitCounter(t, srv.Addr)
	f := startFleet(t)
	f.publish(5)
	// The agent holds version 5 before the sidecar asks: its stream's
	// first frame.
	eventually.True(t, 20*time.Second, "the agent holds version 5", func() bool {
		return agentVersion(t, f.agent) == 5
	})
	for i := range 5 {
		s := startSidecar(t, sidecar.Config{Upstreams: []string{srv.Addr}, NodeAgent: f.agent, StartupWait: time.Minute})
		replies := heldPipeline(t, s.addr)
		body, since := s.waitStarted(t)
		if !strings.Contains(body, "in force from the node agent") {
			t.Fatalf("/startupz = %q, want in force from the agent", body)
		}
		if v := s.metric(t, "heatsink_proxy_routing_version"); v != 5 {
			t.Fatalf("routing version %v at start, want 5 (the first frame)", v)
		}
		checkHeld(t, replies, direct)
		reseed(t, direct)
		t.Logf("sidecar %d, node agent: /startupz 200 %s after Run (its own heatsink_proxy_startup_wait_seconds %.1f ms)", i, since.Round(100*time.Microsecond), 1000*s.metric(t, "heatsink_proxy_startup_wait_seconds"))
	}
}

// TestNewSidecarStartsOnceItsAgentKnowsThePod: at a real pod's start the
// agent refuses the sidecar (403) until the manager, watching pods, has
// named the pod's address to it; the sidecar retries at most a second
// apart (jittered) meanwhile. The time from the naming to /startupz 200 is
// logged.
func TestNewSidecarStartsOnceItsAgentKnowsThePod(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	direct := seedSplitCounter(t, srv.Addr)
	f := startFleetUnnamed(t)
	f.publish(2)
	s := startSidecar(t, sidecar.Config{Upstreams: []string{srv.Addr}, NodeAgent: f.agent, StartupWait: time.Minute})
	replies := heldPipeline(t, s.addr)
	// Refused until named: a few retries, then the naming.
	eventually.True(t, 20*time.Second, "the agent refused the sidecar twice", func() bool {
		return f.refusals(t) >= 2
	})
	if code, _ := get(t, s.http+"/startupz"); code != 503 {
		t.Fatalf("/startupz = %d while the agent refuses the pod, want 503", code)
	}
	named := time.Now()
	f.hub.UpsertPod("ns/app-0", "node-a", agentlink.Pod{IP: "127.0.0.1", Policy: "ns/p"})
	body, _ := s.waitStarted(t)
	t.Logf("pod named to its agent %s after Run; /startupz 200 %s after the naming", named.Sub(s.begun).Round(time.Millisecond), time.Since(named).Round(time.Millisecond))
	if !strings.Contains(body, "in force from the node agent") {
		t.Fatalf("/startupz = %q", body)
	}
	checkHeld(t, replies, direct)
}

// agentVersion reads the version the agent serves for ns/p (0: none yet)
// from its stream's first frame.
func agentVersion(t *testing.T, agent string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+agent+sidecarlink.RoutingRequest{Namespace: "ns", Name: "p", Heartbeat: time.Second}.URI(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var v int64
	_ = sidecarlink.ReadFrames(bufio.NewReader(resp.Body), func(version int64, _ []byte) {
		if v == 0 {
			v = version
		}
		cancel()
	})
	return v
}

// kubeletVolume lays out dir as the kubelet's atomic writer does for a
// ConfigMap volume: the content in a timestamped directory, ..data a
// symlink to it, and each key a symlink through ..data. No content is the
// volume of an optional ConfigMap that does not exist. Called again, it
// swaps the content as the kubelet does when the ConfigMap changes.
func kubeletVolume(t *testing.T, dir string, content map[string]string) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..2026_01_01_00_00_00.")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range content {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, k)); err != nil {
			if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// goneAgent is a loopback port nobody listens on: the node agent away.
func goneAgent(t *testing.T) string {
	gone := listen(t)
	defer gone.Close()
	return gone.Addr().String()
}

// TestNewSidecarStartsFromTheMountedTable: with its node agent away, a new
// sidecar is in force on the mounted ConfigMap's table, read at start, and
// serves the held pipeline under it; the time from Run to /startupz 200 is
// logged.
func TestNewSidecarStartsFromTheMountedTable(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	direct := seedSplitCounter(t, srv.Addr)
	dir := t.TempDir()
	kubeletVolume(t, dir, map[string]string{routing.ConfigMapKey: fmt.Sprintf(splitTable, 4)})
	for i := range 5 {
		s := startSidecar(t, sidecar.Config{Upstreams: []string{srv.Addr}, NodeAgent: goneAgent(t),
			RoutingFile: filepath.Join(dir, routing.ConfigMapKey), StartupWait: time.Minute})
		replies := heldPipeline(t, s.addr)
		body, since := s.waitStarted(t)
		if !strings.Contains(body, "in force from the mounted file") {
			t.Fatalf("/startupz = %q, want in force from the file", body)
		}
		checkHeld(t, replies, direct)
		reseed(t, direct)
		t.Logf("sidecar %d, mounted file, agent away: /startupz 200 %s after Run (its own heatsink_proxy_startup_wait_seconds %.1f ms)", i, since.Round(100*time.Microsecond), 1000*s.metric(t, "heatsink_proxy_startup_wait_seconds"))
	}
}

// TestNewSidecarStartsAtOnceWhenNothingWasPublished: the mounted volume of
// a routing ConfigMap that did not exist when the kubelet set it up proves
// that no table was in force: the sidecar serves at once, with its agent
// away, and follows the table once the kubelet brings it.
func TestNewSidecarStartsAtOnceWhenNothingWasPublished(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	seedSplitCounter(t, srv.Addr)
	dir := t.TempDir()
	kubeletVolume(t, dir, nil)
	s := startSidecar(t, sidecar.Config{Upstreams: []string{srv.Addr}, NodeAgent: goneAgent(t),
		RoutingFile: filepath.Join(dir, routing.ConfigMapKey), StartupWait: time.Minute})
	body, since := s.waitStarted(t)
	if !strings.Contains(body, "none was published") {
		t.Fatalf("/startupz = %q, want in force (nothing published)", body)
	}
	t.Logf("nothing published, agent away: /startupz 200 %s after Run", since.Round(100*time.Microsecond))
	if v := s.metric(t, "heatsink_proxy_serving_unmitigated"); v != 0 {
		t.Fatalf("heatsink_proxy_serving_unmitigated = %v with nothing published", v)
	}
	// The manager publishes; the kubelet brings the ConfigMap into the
	// volume and the sidecar follows it.
	kubeletVolume(t, dir, map[string]string{routing.ConfigMapKey: fmt.Sprintf(splitTable, 1), "state": "{}"})
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	eventually.True(t, 20*time.Second, "the table the kubelet brought applies", func() bool {
		return c.Get(context.Background(), "likes").Val() == "30"
	})
}

// TestNewSidecarPastTheStartupWaitServesUnmitigatedLoudly: with no table
// anywhere (its agent holds none, no file), the sidecar serves once its
// startup wait passed, and says so: /startupz's body, the metric
// heatsink_proxy_serving_unmitigated; the split counter then reads as its
// base key alone. The first table ends it.
func TestNewSidecarPastTheStartupWaitServesUnmitigatedLoudly(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	seedSplitCounter(t, srv.Addr)
	f := startFleet(t)
	s := startSidecar(t, sidecar.Config{Upstreams: []string{srv.Addr}, NodeAgent: f.agent, StartupWait: 300 * time.Millisecond})
	body, since := s.waitStarted(t)
	if !strings.Contains(body, "UNMITIGATED") {
		t.Fatalf("/startupz past the wait = %q, want it to say UNMITIGATED", body)
	}
	t.Logf("past the 300ms startup wait: /startupz 200 %s after Run", since.Round(100*time.Microsecond))
	if u, in := s.metric(t, "heatsink_proxy_serving_unmitigated"), s.metric(t, "heatsink_proxy_routing_in_force"); u != 1 || in != 0 {
		t.Fatalf("serving_unmitigated %v, routing_in_force %v; want 1, 0", u, in)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	if v := c.Get(context.Background(), "likes").Val(); v != "10" {
		t.Fatalf("GET likes without a table = %q, want the base key alone, 10 (the documented degradation)", v)
	}
	f.publish(1)
	eventually.True(t, 20*time.Second, "the first table ends unmitigated serving", func() bool {
		return c.Get(context.Background(), "likes").Val() == "30" && s.metric(t, "heatsink_proxy_serving_unmitigated") == 0 &&
			s.metric(t, "heatsink_proxy_routing_in_force") == 1
	})
}

// TestSidecarStoppedWhileHoldingExitsCleanly: a sidecar stopped before
// anything was in force closes its held connections and returns nil.
func TestSidecarStoppedWhileHoldingExitsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	seedSplitCounter(t, srv.Addr)
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{Listener: ln, Upstreams: []string{srv.Addr}, Policy: "p", Namespace: "ns",
			NodeAgent: goneAgent(t), StartupWait: time.Minute})
	}()
	replies := heldPipeline(t, ln.Addr().String())
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if got := <-replies; len(got) == 0 || !strings.HasPrefix(got[0], "error: ") {
		t.Fatalf("held pipeline of a stopped sidecar got %q, want the connection closed unanswered", got)
	}
}
