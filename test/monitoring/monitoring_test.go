// Package monitoring tests heatsink's alerts and dashboard: the rules pass
// promtool's checks and unit tests, and every metric the rules and the
// dashboard read is one a heatsink component exports.
package monitoring

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func promtool(t *testing.T, r string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs promtool from bin/; skipped with -short")
	}
	p := os.Getenv("PROMTOOL_BIN")
	if p == "" {
		matches, _ := filepath.Glob(filepath.Join(r, "bin", "promtool-v*"))
		sort.Strings(matches)
		if len(matches) > 0 {
			p = matches[len(matches)-1]
		}
	}
	if _, err := os.Stat(p); p == "" || err != nil {
		t.Fatalf("promtool not found (PROMTOOL_BIN=%q): run `make promtool`, which builds it from the Go module proxy", p)
	}
	return p
}

// TestAlertRules runs promtool's checks and the rules' unit tests
// (config/prometheus/rules_test.yaml: each alert fires on the series it is
// for and stays quiet on healthy ones).
func TestAlertRules(t *testing.T) {
	r := root(t)
	pt := promtool(t, r)
	dir := filepath.Join(r, "config", "prometheus")
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// recorder is a registry that also keeps the name of every metric
// registered, whether or not it has a series yet (a labelled metric has none
// until its first use).
type recorder struct {
	*prometheus.Registry
	mu     sync.Mutex
	names  map[string]bool
	labels map[string][]string // metric -> variable label names
}

func newRecorder() *recorder {
	return &recorder{Registry: prometheus.NewRegistry(), names: map[string]bool{}, labels: map[string][]string{}}
}

var (
	fqName         = regexp.MustCompile(`fqName: "([^"]+)"`)
	variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.mu.Lock()
			r.names[m[1]] = true
			if l := variableLabels.FindStringSubmatch(d.String()); l != nil && l[1] != "" {
				r.labels[m[1]] = strings.Split(l[1], ",")
			}
			r.mu.Unlock()
		}
	}
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[name]
}

// exported collects the metric names every heatsink component registers:
// the manager (reconciler, hub), a node agent and a sidecar, each
// built as it runs.
func exported(t *testing.T) (map[string]bool, map[string][]string) {
	t.Helper()
	rec := newRecorder()
	controllers.NewMetrics(rec)
	if _, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "t", Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	// The agent takes a kernel-chosen UDP port and the same port over TCP,
	// which another process may hold: a few tries, each on a new port.
	var d *nodeagent.Agent
	var err error
	for range 5 {
		d, err = nodeagent.New(nodeagent.Options{NodeName: "n1", Manager: "127.0.0.1:1", Token: "t", ListenAddr: "127.0.0.1:0", Registerer: rec})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		rec = newRecorder() // the failed attempt registered its metrics
		controllers.NewMetrics(rec)
		if _, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "t", Registerer: rec}); err != nil {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = d.Run(ctx) // closes its sockets
	// An agent with --capture also exports the capture's metrics.
	if err := nodeagent.RegisterCaptureMetrics(rec, new(capture.Capture), func() bool { return true }); err != nil {
		t.Fatal(err)
	}

	// The sidecar: its proxy, engine and own metrics, on one registry.
	side := newRecorder()
	file := filepath.Join(t.TempDir(), "routing.json")
	if err := os.WriteFile(file, []byte(`{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	gone := listen()
	agent := gone.Addr().String()
	gone.Close()
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(sctx, sidecar.Config{Listener: listen(), Upstreams: []string{"127.0.0.1:1"},
			Policy: "p", Namespace: "ns", RoutingFile: file, NodeAgent: agent, Registry: side})
	}()
	eventually.True(t, 10*time.Second, "the sidecar registers its metrics", func() bool {
		return side.has("heatsink_proxy_routing_version") && side.has("heatsink_proxy_node_agent_send_errors_total")
	})
	scancel()
	if err := <-done; err != nil {
		t.Fatalf("sidecar: %v", err)
	}
	out, labels := map[string]bool{}, map[string][]string{}
	for _, r := range []*recorder{rec, side} {
		for n := range r.names {
			out[n] = true
		}
		for n, l := range r.labels {
			labels[n] = l
		}
	}
	return out, labels
}

// TestOneLabelScheme checks the labels of every heatsink metric: a metric
// about a policy carries namespace and policy (never "ns/name" in one
// label), and no label can hold a Redis key.
func TestOneLabelScheme(t *testing.T) {
	names, labels := exported(t)
	if len(names) < 30 {
		t.Fatalf("only %d metrics recorded", len(names))
	}
	for n, ls := range labels {
		if !strings.HasPrefix(n, "heatsink_") {
			continue
		}
		has := map[string]bool{}
		for _, l := range ls {
			has[l] = true
			switch l {
			case "key", "redis_key", "logical_key":
				t.Errorf("%s has a label %q: a Redis key must never be a label value", n, l)
			case "policy_id", "id", "policy_name":
				t.Errorf("%s labels its policy %q: use namespace and policy", n, l)
			}
		}
		if has["policy"] != has["namespace"] {
			t.Errorf("%s has labels %v: a policy is named by namespace and policy together", n, ls)
		}
	}
}

var metricName = regexp.MustCompile(`\bheatsink_[a-z0-9_]+\b`)

// used lists the heatsink metric names in expressions; a histogram's
// series names (_bucket, _sum, _count) count as its own.
func used(exprs []string) map[string][]string {
	out := map[string][]string{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			n = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			out[n] = append(out[n], e)
		}
	}
	return out
}

// TestDashboardAndAlertsReadExportedMetrics parses the dashboard and the
// rules and checks that every heatsink metric they read is exported by a
// component, so a renamed metric cannot leave a panel or an alert blind.
func TestDashboardAndAlertsReadExportedMetrics(t *testing.T) {
	r := root(t)
	names, _ := exported(t)

	var exprs []string
	raw, err := os.ReadFile(filepath.Join(r, "config", "grafana", "heatsink.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("heatsink.json: %v", err)
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d queries; want the ${datasource} variable and a query", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}

	rawRules, err := os.ReadFile(filepath.Join(r, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rawRules, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, rule := range g.Rules {
			exprs = append(exprs, rule.Expr)
		}
	}
	reads := used(exprs)
	if len(reads) < 10 {
		t.Fatalf("only %d heatsink metrics read by the dashboard and rules: the parse is wrong", len(reads))
	}
	for n, where := range reads {
		if !names[n] {
			t.Errorf("%s is read by %q but no component exports it", n, where[0])
		}
	}
}
