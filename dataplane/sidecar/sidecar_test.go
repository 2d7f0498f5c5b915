package sidecar_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSidecarFollowsRoutingFile runs the whole sidecar against a real Redis
// with a routing file that caches one key, and checks the HTTP endpoints.
func TestSidecarFollowsRoutingFile(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	file := filepath.Join(t.TempDir(), "routing.json")
	table := `{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[
		{"key":"hot","source":"detected","coalesce":true,"localCache":{"ttlMillis":600000}}]}`
	if err := os.WriteFile(file, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, hl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{
			Listener: ln, HTTPListener: hl, Upstreams: []string{srv.Addr},
			Policy: "p", Namespace: "ns", RoutingFile: file,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base := "http://" + hl.Addr().String()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	defer c.Close()
	bg := context.Background()
	if err := c.Set(bg, "hot", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	// Once the table is loaded, reads of "hot" come from the local cache:
	// a write behind the proxy's back is not seen.
	eventually.True(t, 10*time.Second, "the routing table from the file applies", func() bool {
		c.Get(bg, "hot")
		direct.Set(bg, "hot", "behind", 0)
		if v := c.Get(bg, "hot").Val(); v != "behind" {
			return true
		}
		direct.Set(bg, "hot", "v1", 0)
		return false
	})
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{"heatsink_proxy_commands_total{path=\"engine\"}", "heatsink_engine_cache_hits_total", "heatsink_proxy_connections"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, "\"hot\"") {
		t.Error("/metrics carries a Redis key as a label value")
	}
}

// metricValue reads an unlabelled sample of the text exposition.
func metricValue(metrics, name string) (float64, bool) {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestSidecarExportsRoutingVersionAndDrops checks the sidecar's own metrics:
// the version of the routing table it obeys, and the counts it failed to
// send to its node agent (here, none is listening).
func TestSidecarExportsRoutingVersionAndDrops(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	file := filepath.Join(t.TempDir(), "routing.json")
	table := `{"schemaVersion":1,"policy":"ns/p","version":7,"epochMillis":60000,"entries":[]}`
	if err := os.WriteFile(file, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	// A loopback port nobody listens on, for UDP counts and TCP routing.
	gone := listen(t)
	agent := gone.Addr().String()
	gone.Close()
	ln, hl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{
			Listener: ln, HTTPListener: hl, Upstreams: []string{srv.Addr},
			Policy: "p", Namespace: "ns", RoutingFile: file, NodeAgent: agent,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	defer c.Close()
	base := "http://" + hl.Addr().String()
	eventually.True(t, 20*time.Second, "routing version 7 and failed sends are exported", func() bool {
		c.Get(context.Background(), "some:key") // an access to report
		_, metrics := get(t, base+"/metrics")
		v, ok := metricValue(metrics, "heatsink_proxy_routing_version")
		errs, _ := metricValue(metrics, "heatsink_proxy_node_agent_send_errors_total")
		_, dropped := metricValue(metrics, "heatsink_proxy_node_agent_observations_dropped_total")
		return ok && v == 7 && errs > 0 && dropped
	})
}
