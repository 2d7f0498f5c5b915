package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
)

// TestStoppedCaptureFailsReadiness: a real agent with a real capture on one
// interface of the "node" (the observer namespace) is ready; the interface
// is deleted, as when a CNI recreates its bridge, and the capture stops: the
// agent's /readyz turns 503 and heatsink_node_agent_capture_running 0 (the
// alert HeatsinkNodeAgentCaptureStopped reads it), while /healthz stays OK
// (the agent still serves its node's sidecars).
func TestStoppedCaptureFailsReadiness(t *testing.T) {
	n := netns.ForTest(t)
	var c *capture.Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = capture.Open(capture.Config{Interface: n.ClientIf})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	probe := freeAddr(t)
	reg := prometheus.NewRegistry()
	startOpts(t, nil, func(o *Options) { o.Capture, o.ProbeAddr, o.Registerer = c, probe, reg })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + probe + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	running := func() float64 {
		g, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range g {
			if mf.GetName() == "heatsink_node_agent_capture_running" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	eventually.True(t, 20*time.Second, "ready while the capture runs", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK && running() == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := netns.Command(ctx, n.Observer, "ip", "link", "del", n.ClientIf).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v\n%s", err, out)
	}
	err := eventually.Poll(ctx, 20*time.Second, func() error {
		if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "capture not running" {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		if v := running(); v != 0 {
			return fmt.Errorf("heatsink_node_agent_capture_running %v", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d %q: the agent still serves its sidecars", code, body)
	}
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
