//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// The capture's scenario (docs/capture.md), in the Helm install, which
// turns nodeAgent.capture on: a Deployment WITHOUT the injection
// annotation reads a hot key straight from the Redis Cluster's pods, and a
// policy in Observe mode that targets the cluster shows the key, with its
// rates, from the node agent's packet capture alone.

const observePolicy, readerKey = "seen", "item:viral"

// observePolicyYAML targets the cluster by its Service (through the
// ClusterRedisTarget, as a user names it): the cluster client discovers the masters through it and then talks to
// their pod addresses, which the capture takes from the slot map the
// manager reads (CLUSTER SLOTS) and sends in the policy's directive.
const observePolicyYAML = targetYAML + `---
apiVersion: heatsink.dev/v1alpha1
kind: HotKeyPolicy
metadata: {name: seen, namespace: shop}
spec:
  mode: Observe
  target:
    clusterTargetRef: {name: redis-cluster}
  keys:
    include: ["item:*"]
  detection: {window: 5s, topK: 16, reportInterval: 1s}
  thresholds: {readsPerSecond: 200, writesPerSecond: 60, sustainFor: 2s, cooldown: 5m}
  mitigations:
    localCache: {enabled: true, ttl: 1s}
`

// readerYAML is the uninjected application: no heatsink.dev/inject
// annotation, a cluster client seeded with the Service. It sends nothing until
// POST /viral (no background keys, no counter), so that every connection it
// opens is one the capture sees from its first byte.
const readerYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: reader, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: reader}}
  template:
    metadata:
      labels: {app: reader}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: app
        image: {{.Image}}
        args: [--cluster, --redis, "redis.redis.svc.cluster.local:6379", --read-key, item:viral, --counter, item:count,
               --viral-rate, "400", --incr-rate, "0", --background-rate, "0"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 1
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {memory: 128Mi}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
`

// uninjectedScenario runs the capture's scenario; the policy's namespace
// (appNamespace) exists, holds no other policy, and the manager admits
// policies.
func uninjectedScenario(t *testing.T, e env, c client.Client, masters []string, rep *report) {
	ctx := context.Background()
	agent := agentMetricsURL(t, c)
	before := scrape(t, agent)

	rep.step(t, "helm: uninjected Deployment and an Observe policy on the masters", func() {
		kubectl(t, []byte(observePolicyYAML), "apply", "-f", "-")
		kubectl(t, render(readerYAML, map[string]string{"Image": e.WorkloadImage}), "apply", "-f", "-")
		kubectl(t, nil, "-n", appNamespace, "rollout", "status", "deployment/reader", "--timeout=300s")
	})
	reader := runningPod(t, c, "reader")
	if len(reader.Spec.InitContainers) > 0 || len(reader.Spec.Containers) != 1 {
		t.Fatalf("reader pod %s was changed: %d init containers, %d containers", reader.Name, len(reader.Spec.InitContainers), len(reader.Spec.Containers))
	}
	// The agent counts a pod's traffic once the manager has told it of the
	// pod and of the policy's endpoints (its scope; the masters come with
	// the slot map, read at the policy's first capacity sample): only then
	// is the traffic started, so that it is counted from its first command.
	rep.step(t, "helm: node agent's capture scope has the pod and the masters (slot map)", func() {
		eventually.Succeeds(t, time.Minute, func() error {
			m := scrape(t, agent)
			if m["heatsink_node_agent_capture_scope_pods"] < 1 || m["heatsink_node_agent_capture_scope_endpoints"] < float64(len(masters)) {
				return fmt.Errorf("capture scope: %v pods, %v endpoints", m["heatsink_node_agent_capture_scope_pods"], m["heatsink_node_agent_capture_scope_endpoints"])
			}
			return nil
		})
	})

	start := time.Now()
	post(t, reader.Status.PodIP, "/viral")
	var reported v1alpha1.Candidate
	var status v1alpha1.HotKeyStatus
	rep.step(t, "helm: uninjected hot key in the HotKeyReport and the policy's status", func() {
		eventually.Succeeds(t, 2*time.Minute, func() error {
			var r v1alpha1.HotKeyReport
			if err := c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: observePolicy}, &r); err != nil {
				return err
			}
			var p v1alpha1.HotKeyPolicy
			if err := c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: observePolicy}, &p); err != nil {
				return err
			}
			okR, okS := false, false
			for _, cand := range r.Spec.Candidates {
				if cand.Key == readerKey && cand.ReadsPerSecond >= 200 {
					reported, okR = cand, true
				}
			}
			for _, h := range p.Status.HotKeys {
				if h.Key == readerKey && h.ReadsPerSecond >= 200 && h.Source == v1alpha1.SourceDetected {
					status, okS = h, true
				}
			}
			if !okR || !okS {
				return fmt.Errorf("report candidates %+v; status hotKeys %+v", r.Spec.Candidates, p.Status.HotKeys)
			}
			return nil
		})
	})
	detected := time.Since(start)
	// 400 GETs/s sent: a rate near twice that would be each packet counted
	// on two interfaces (the pod's veth and the bridge).
	for what, rates := range map[string][2]int64{
		"report": {reported.ReadsPerSecond, reported.WritesPerSecond},
		"status": {status.ReadsPerSecond, status.WritesPerSecond}} {
		if rates[0] > 560 || rates[1] != 0 {
			t.Errorf("%s: %s at %d reads/s and %d writes/s; the reader sends 400 GETs/s and no write", what, readerKey, rates[0], rates[1])
		}
	}

	s := post(t, reader.Status.PodIP, "/stop")
	sent := s.Gets + s.ViralGets
	if s.CounterReadError == "" {
		sent++ // the counter's GET at /stop
	}
	if s.ViralGetErrors > 0 || s.IncrAcked+s.IncrErrors > 0 {
		t.Errorf("reader: %+v", s)
	}
	// Every command sent is counted exactly once: the reader's connections
	// were all opened while the agent knew the pod, nothing else of the
	// namespace without a sidecar talks to the masters, and this is the
	// namespace's one policy (another on the same Redis would count them
	// too, for itself: the first run here, with the Enforce policy still
	// there, counted 6,486 for 3,243 sent).
	// A packet the kernel dropped or a hole in a stream loses the command
	// in it (one command a packet here), and the agent says so in its
	// metrics: then the count may fall short by those, never exceed.
	var after map[string]float64
	delta := func(name string) float64 { return after[name] - before[name] }
	eventually.Succeeds(t, 30*time.Second, func() error {
		after = scrape(t, agent)
		got := delta("heatsink_node_agent_capture_counted_total")
		lost := delta("heatsink_node_agent_capture_kernel_drops_total") + delta("heatsink_node_agent_capture_gaps_total")
		if got == float64(sent) || (got < float64(sent) && float64(sent)-got <= lost) {
			return nil
		}
		return fmt.Errorf("captured commands counted %v, the reader sent %d (parsed %v, not served %v, resyncs %v, kernel drops %v, gaps %v, flows refused %v)",
			got, sent, delta("heatsink_node_agent_capture_commands_total"), delta("heatsink_node_agent_capture_not_served_total"),
			delta("heatsink_node_agent_capture_resyncs_total"), delta("heatsink_node_agent_capture_kernel_drops_total"),
			delta("heatsink_node_agent_capture_gaps_total"), delta("heatsink_node_agent_capture_flows_refused_total"))
	})
	rep.add("| helm: /viral → uninjected key in report and status | %s |", detected.Round(100*time.Millisecond))
	rep.add("| helm: %s reads/s in report / status (reader sends 400/s) | %d / %d |", readerKey, reported.ReadsPerSecond, status.ReadsPerSecond)
	rep.add("| helm: capture: commands sent / counted / parsed / not served, packets, kernel drops, gaps | %d / %.0f / %.0f / %.0f, %.0f, %.0f, %.0f |", sent,
		delta("heatsink_node_agent_capture_counted_total"), delta("heatsink_node_agent_capture_commands_total"),
		delta("heatsink_node_agent_capture_not_served_total"),
		delta("heatsink_node_agent_capture_packets_total"), delta("heatsink_node_agent_capture_kernel_drops_total"),
		delta("heatsink_node_agent_capture_gaps_total"))
	if d := delta("heatsink_node_agent_capture_commands_total"); d < float64(sent)-delta("heatsink_node_agent_capture_kernel_drops_total")-delta("heatsink_node_agent_capture_gaps_total") {
		t.Errorf("capture parsed %v commands, the reader sent %d", d, sent)
	}
	// The capture listens on every interface of the node: the reader's
	// packets cross its veth and the bridge. Each command is a packet here
	// (no pipelining), plus the handshakes and a few bare ACKs; each packet
	// taken twice (on the veth and again on the bridge) would be about 2×.
	if p := delta("heatsink_node_agent_capture_packets_total"); p > 1.5*float64(sent) {
		t.Errorf("capture passed %v packets for %d commands sent one per packet: packets taken on two interfaces", p, sent)
	}

	rep.step(t, "helm: uninjected Deployment and Observe policy deleted", func() {
		kubectl(t, nil, "-n", appNamespace, "delete", "deployment", "reader", "--wait", "--timeout=120s")
		kubectl(t, nil, "-n", appNamespace, "delete", "hotkeypolicy", observePolicy, "--wait", "--timeout=120s")
	})
}

// agentMetricsURL is the node agent's metrics address: with the capture on
// it runs in the node's network namespace, where the test runs too.
func agentMetricsURL(t *testing.T, c client.Client) string {
	var pl corev1.PodList
	if err := c.List(context.Background(), &pl, client.InNamespace(systemNamespace), client.MatchingLabels{"app.kubernetes.io/component": "node-agent"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pl.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			if !p.Spec.HostNetwork {
				t.Fatalf("node agent %s is not on the host network: the capture is off", p.Name)
			}
			for _, c := range p.Spec.Containers {
				for _, port := range c.Ports {
					if port.Name == "metrics" { // the node's port: nodeAgent.hostPorts.metrics
						return fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, port.ContainerPort)
					}
				}
			}
			t.Fatalf("node agent %s has no port named metrics", p.Name)
		}
	}
	t.Fatal("no running node agent")
	return ""
}

// scrape reads the unlabelled samples of heatsink's node agent metrics.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "heatsink_node_agent_capture_") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runningPod is the one running pod labelled app=name in the app namespace.
func runningPod(t *testing.T, c client.Client, name string) corev1.Pod {
	var pl corev1.PodList
	if err := c.List(context.Background(), &pl, client.InNamespace(appNamespace), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pl.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d running %s pods, want 1", len(out), name)
	}
	return out[0]
}
