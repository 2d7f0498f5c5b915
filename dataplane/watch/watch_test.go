package watch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/dataplane/watch"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/nodeagent"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

func tableJSON(t *testing.T, version int64, schema int, keys ...string) string {
	t.Helper()
	tb := routing.Table{SchemaVersion: schema, Policy: "shop/checkout", Version: version, EpochMillis: 60_000}
	for _, k := range keys {
		tb.Entries = append(tb.Entries, routing.Entry{Key: k, Source: routing.SourceDetected, Coalesce: true})
	}
	b, err := json.Marshal(tb)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAccept(t *testing.T) {
	cur := &routing.Table{SchemaVersion: 1, Version: 5, EpochMillis: 1000}
	for name, tc := range map[string]struct {
		current *routing.Table
		data    string
		want    int64 // accepted version; 0 = none
		err     string
	}{
		"first table":        {current: nil, data: tableJSON(t, 1, 1, "a"), want: 1},
		"newer":              {current: cur, data: tableJSON(t, 6, 1, "a"), want: 6},
		"same version":       {current: cur, data: tableJSON(t, 5, 1, "b")},
		"older":              {current: cur, data: tableJSON(t, 4, 1), err: "older"},
		"future schema":      {current: cur, data: tableJSON(t, 9, routing.SchemaVersion+1), err: "schemaVersion"},
		"not json":           {current: cur, data: "{routing", err: "routing table"},
		"empty":              {current: cur, data: "", err: "routing table"},
		"invalid (unsorted)": {current: cur, data: tableJSON(t, 7, 1, "b", "a"), err: "sorted"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := watch.Accept(tc.current, []byte(tc.data))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == 0) || (got != nil && got.Version != tc.want) {
				t.Fatalf("accepted %+v, want version %d", got, tc.want)
			}
		})
	}
}

// recorder collects what a watcher reports.
type recorder struct {
	mu       sync.Mutex
	versions []int64
	rejects  []string
}

func (r *recorder) table(t *routing.Table) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, t.Version)
}

func (r *recorder) reject(src watch.Source, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejects = append(r.rejects, string(src)+": "+err.Error())
}

func (r *recorder) last() (int64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.versions) == 0 {
		return 0, len(r.rejects)
	}
	return r.versions[len(r.versions)-1], len(r.rejects)
}

// fleetUnderTest is a real hub and one real node agent connected to
// it, as a sidecar's node has them; the sidecar's pod is 127.0.0.1.
type fleetUnderTest struct {
	hub   *hub.Hub
	agent string // the agent's routing address
	stop  func() // stops the agent
}

const testPolicy = "shop/checkout"

func startFleet(t *testing.T) *fleetUnderTest {
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
	h.SetPolicy(testPolicy, hub.ParamsFromSpec(spec))
	h.UpsertPod("shop/app-0", "node-a", agentlink.Pod{IP: "127.0.0.1", Policy: testPolicy})
	f := &fleetUnderTest{hub: h}
	f.agent, f.stop = startAgent(t, addr, "127.0.0.1:0")
	return f
}

// startAgent runs a node agent for node-a on listen until stop.
func startAgent(t *testing.T, manager, listen string) (routingAddr string, stop func()) {
	t.Helper()
	d, err := nodeagent.New(nodeagent.Options{NodeName: "node-a", ListenAddr: listen, Manager: manager, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	eventually.True(t, 20*time.Second, "the agent connects to the manager", func() bool { return d.Stats().Connected })
	return d.RoutingAddr().String(), stop
}

func (f *fleetUnderTest) publish(t *testing.T, version int64, data string) {
	t.Helper()
	f.hub.SetRouting(testPolicy, version, []byte(data), nil)
}

// TestWatcherFollowsItsNodeAgentAndKeepsLastGood: the sidecar follows the
// tables the manager pushes through the node's agent, with no API
// credentials; a bad table is refused and the last good one stays; when the
// agent is away the table stays and the mounted file still brings newer
// ones; a restarted agent serves again.
func TestWatcherFollowsItsNodeAgentAndKeepsLastGood(t *testing.T) {
	f := startFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	file := filepath.Join(t.TempDir(), routing.ConfigMapKey)
	rec := &recorder{}
	w, err := watch.New(watch.Options{
		Agent: f.agent, Namespace: "shop", Policy: "checkout", Heartbeat: 2 * time.Second,
		File: file, FilePoll: 20 * time.Millisecond,
		OnTable: rec.table, OnReject: rec.reject,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Another policy's table is not this sidecar's.
	f.hub.SetRouting("shop/other", 99, []byte(tableJSON(t, 99, 1, "x")), nil)
	f.publish(t, 1, tableJSON(t, 1, 1, "product:1"))
	eventually.True(t, 20*time.Second, "version 1", func() bool { v, _ := rec.last(); return v == 1 })
	f.publish(t, 2, tableJSON(t, 2, 1, "product:1", "product:2"))
	eventually.True(t, 20*time.Second, "version 2", func() bool { v, _ := rec.last(); return v == 2 })

	// Bad publications are refused one by one (each once); version 2 stays.
	for i, bad := range []string{
		`[1, 2]`,
		tableJSON(t, 4, routing.SchemaVersion+1, "a"),
		tableJSON(t, 1, 1, "a"),
	} {
		f.publish(t, int64(3+i), bad)
		eventually.True(t, 20*time.Second, fmt.Sprintf("reject %d", i+1), func() bool { _, r := rec.last(); return r == i+1 })
		if v, _ := rec.last(); v != 2 || w.Current().Version != 2 {
			t.Fatalf("after bad table %d current version = %d", i, v)
		}
	}
	f.publish(t, 6, tableJSON(t, 6, 1, "product:3"))
	eventually.True(t, 20*time.Second, "version 6", func() bool { v, _ := rec.last(); return v == 6 })
	if _, r := rec.last(); r != 3 {
		t.Fatalf("%d rejections, want each bad table refused once", r)
	}

	// The agent goes away: the table stays, and the mounted file still
	// brings newer tables (and only newer ones).
	f.stop()
	f.publish(t, 8, tableJSON(t, 8, 1, "unreachable"))
	if got := w.Current(); got == nil || got.Version != 6 {
		t.Fatalf("after the agent stopped current = %+v", got)
	}
	_, rejects := rec.last()
	if err := os.WriteFile(file, []byte(tableJSON(t, 2, 1, "old")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "stale file refused", func() bool { _, r := rec.last(); return r == rejects+1 })
	if err := os.WriteFile(file, []byte(tableJSON(t, 7, 1, "product:4")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "version 7 from the file", func() bool { v, _ := rec.last(); return v == 7 })
	if got := w.Current().Entries[0].Key; got != "product:4" {
		t.Fatalf("current entry = %q", got)
	}

	// The agent comes back on its address: it gets the manager's tables
	// again and the sidecar follows.
	startAgent(t, mustAddr(t, f.hub), f.agent)
	eventually.True(t, 20*time.Second, "version 8 through the restarted agent", func() bool { v, _ := rec.last(); return v == 8 })
}

// TestAgentServesOnlyEntitledPods: a pod may read only the routing of the
// policy it was injected for; an address the manager did not name, none.
func TestAgentServesOnlyEntitledPods(t *testing.T) {
	f := startFleet(t)
	f.publish(t, 1, tableJSON(t, 1, 1, "product:1"))
	for path, want := range map[string]int{
		sidecarlink.RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: time.Second}.URI(): http.StatusOK,
		sidecarlink.RoutingRequest{Namespace: "shop", Name: "other", Heartbeat: time.Second}.URI():    http.StatusForbidden,
		sidecarlink.RoutingRequest{Namespace: "other", Name: "checkout"}.URI():                        http.StatusForbidden,
		sidecarlink.RoutingPathPrefix + "shop":                                                        http.StatusNotFound,
	} {
		resp, err := http.Get("http://" + f.agent + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	// From another address (a pod the manager did not name): refused.
	port := f.agent[strings.LastIndex(f.agent, ":")+1:]
	if resp, err := http.Get("http://127.0.0.2:" + port + sidecarlink.RoutingRequest{Namespace: "shop", Name: "checkout"}.URI()); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET from an unnamed address = %d, want 403", resp.StatusCode)
		}
	}
}

func mustAddr(t *testing.T, h *hub.Hub) string {
	t.Helper()
	a, err := h.Addr(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWatcherFileOnlyStartsWithMountedTable(t *testing.T) {
	file := filepath.Join(t.TempDir(), routing.ConfigMapKey)
	if err := os.WriteFile(file, []byte(tableJSON(t, 7, 1, "k")), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w, err := watch.New(watch.Options{File: file, OnTable: rec.table})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	eventually.True(t, 20*time.Second, "the mounted table", func() bool { v, _ := rec.last(); return v == 7 })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := watch.New(watch.Options{OnTable: rec.table}); err == nil {
		t.Fatal("New without a source: want an error")
	}
}

// TestAgentStreamsTables: the agent answers once and keeps the response
// open: the newest table as soon as it holds one, each newer one as a frame
// on the same response when the manager pushes it, and a heartbeat frame
// every heartbeat interval while nothing changes.
func TestAgentStreamsTables(t *testing.T) {
	f := startFleet(t)
	f.publish(t, 1, tableJSON(t, 1, 1, "product:1"))
	resp, err := http.Get("http://" + f.agent + sidecarlink.RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: time.Second}.URI())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != sidecarlink.StreamContentType {
		t.Fatalf("stream request: %d %q", resp.StatusCode, ct)
	}
	type frame struct {
		version int64
		table   *routing.Table
	}
	frames := make(chan frame, 16)
	go func() {
		defer close(frames)
		_ = sidecarlink.ReadFrames(bufio.NewReader(resp.Body), func(v int64, b []byte) {
			var tb *routing.Table
			if v > 0 {
				tb, _ = routing.Parse(b)
			}
			frames <- frame{v, tb}
		})
	}()
	next := func(what string) frame {
		t.Helper()
		select {
		case fr, ok := <-frames:
			if !ok {
				t.Fatalf("%s: the stream ended", what)
			}
			return fr
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: nothing in 20 s", what)
		}
		return frame{}
	}
	// nextTable skips heartbeats: the agent may get version 1 from the
	// manager after the stream opened.
	nextTable := func(what string) frame {
		t.Helper()
		fr := next(what)
		for fr.version == 0 {
			if fr.table != nil {
				t.Fatalf("%s: a heartbeat with a table", what)
			}
			fr = next(what)
		}
		return fr
	}
	if fr := nextTable("the current table"); fr.version != 1 || fr.table == nil || fr.table.Version != 1 {
		t.Fatalf("first frame: version %d, table %+v", fr.version, fr.table)
	}
	f.publish(t, 2, tableJSON(t, 2, 1, "product:1", "product:2"))
	if fr := nextTable("version 2"); fr.version != 2 || fr.table == nil || len(fr.table.Entries) != 2 {
		t.Fatalf("second table frame: version %d, table %+v", fr.version, fr.table)
	}
	if fr := next("a heartbeat"); fr.version != 0 || fr.table != nil {
		t.Fatalf("with nothing new, got frame version %d", fr.version)
	}
}
