//go:build e2e

// Package e2e runs heatsink as users do: installed with Helm, and again with
// kustomize, into a real one-node Kubernetes (hack/cluster: kubelet,
// containerd, runc, CNI, kube-proxy, CoreDNS), with real pods from the
// images `make image` and `make e2e-images` build. `make e2e` brings the
// cluster up, runs this test inside the cluster's network namespace
// (`hack/cluster exec`), and tears the cluster down.
//
// For each install method: a 3-master Redis Cluster in pods, a HotKeyPolicy
// applied with kubectl, an application Deployment annotated for injection
// whose pods get the sidecar and send a viral read key and a viral counter;
// the keys are detected, routed and relieved, measured from Redis INFO as
// the demo does; an upgrade with a changed value keeps the routing table and
// breaks no client; the counter is exact; the policy is deleted and heatsink
// uninstalled with nothing stuck. A third pass installs the previous
// release and upgrades it to this one, then rolls the workload onto this
// release's sidecar (upgrade_test.go). The Helm install turns the node agent's
// capture on, and a Deployment without the sidecar has its hot key shown by
// a policy in Observe mode (capture_test.go). Each step's time, the pods' restarts and
// the sidecar's and node agent's RSS are written to $E2E_OUT/report.md.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/heatsink-dev/heatsink/demo/observe"
	"github.com/heatsink-dev/heatsink/internal/scheme"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/routing"
)

const systemNamespace = "heatsink-system"

// env is what `make e2e` passes in.
type env struct {
	Root, Helm, Ctr, CtrAddress, Out string
	RedisImage, WorkloadImage        string
}

func getenv(t *testing.T) env {
	e := env{
		Root: os.Getenv("E2E_ROOT"), Helm: os.Getenv("HELM_BIN"), Ctr: os.Getenv("E2E_CTR"),
		CtrAddress: os.Getenv("E2E_CTR_ADDRESS"), Out: os.Getenv("E2E_OUT"),
		RedisImage: os.Getenv("E2E_REDIS_IMAGE"), WorkloadImage: os.Getenv("E2E_WORKLOAD_IMAGE"),
	}
	for k, v := range map[string]string{"E2E_ROOT": e.Root, "HELM_BIN": e.Helm, "E2E_CTR": e.Ctr,
		"E2E_CTR_ADDRESS": e.CtrAddress, "E2E_OUT": e.Out, "E2E_REDIS_IMAGE": e.RedisImage,
		"E2E_WORKLOAD_IMAGE": e.WorkloadImage, "KUBECONFIG": os.Getenv("KUBECONFIG")} {
		if v == "" {
			t.Fatalf("%s is not set: run `make e2e`", k)
		}
	}
	return e
}

// run runs a command and returns its stdout; it fails t with stderr.
func run(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	out, err := runErr(stdin, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

func kubectl(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	return run(t, stdin, "kubectl", args...)
}

// report collects what the run measured.
type report struct {
	lines []string
}

func (r *report) add(format string, a ...any) { r.lines = append(r.lines, fmt.Sprintf(format, a...)) }

// step times fn and records it.
func (r *report) step(t *testing.T, name string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	d := time.Since(start).Round(100 * time.Millisecond)
	r.add("| %s | %s |", name, d)
	t.Logf("step %-60s %s", name, d)
}

func TestE2E(t *testing.T) {
	e := getenv(t)
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	log.SetLogger(logr.Discard())
	rep := &report{}
	defer func() {
		if err := os.MkdirAll(e.Out, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(e.Out, "report.md"), []byte(strings.Join(rep.lines, "\n")+"\n"), 0o644)
		}
		t.Logf("report:\n%s", strings.Join(rep.lines, "\n"))
	}()
	rep.add("| step | time |")
	rep.add("|---|---|")

	var masters []string
	rep.step(t, "Redis Cluster: 3 masters in pods", func() { masters = redisCluster(t, e) })

	installers := []installer{helmInstaller{e}, kustomizeInstaller{e}}
	if prev, ok := previousRelease(e); ok {
		installers = append(installers, prev)
	}
	for _, m := range installers {
		if !t.Run(m.name(), func(t *testing.T) { scenario(t, e, c, m, masters, rep) }) {
			break
		}
	}
}

// redisCluster starts the Redis StatefulSet and joins its pods into a
// 3-master cluster; it returns the masters' addresses.
func redisCluster(t *testing.T, e env) []string {
	kubectl(t, render(redisYAML, e), "apply", "-f", "-")
	kubectl(t, nil, "-n", redisNamespace, "rollout", "status", "statefulset/redis", "--timeout=180s")
	ips := strings.Fields(kubectl(t, nil, "-n", redisNamespace, "get", "pods", "-l", "app=redis",
		"-o", "jsonpath={.items[*].status.podIP}"))
	if len(ips) != 3 {
		t.Fatalf("redis pod IPs: %v", ips)
	}
	var addrs []string
	for _, ip := range ips {
		addrs = append(addrs, ip+":6379")
	}
	if info, _ := clusterInfo(addrs[0]); !strings.Contains(info, "cluster_state:ok") {
		run(t, nil, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...)
	}
	eventually.Succeeds(t, 60*time.Second, func() error {
		for _, a := range addrs {
			info, err := clusterInfo(a)
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster not ok", a)
			}
		}
		return nil
	})
	return addrs
}

// clusterInfo is CLUSTER INFO on one node.
func clusterInfo(addr string) (string, error) {
	r := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, PoolSize: 1})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return r.ClusterInfo(ctx).Result()
}

// installer is how heatsink gets into the cluster.
type installer interface {
	name() string
	install(t *testing.T)
	// policy is the HotKeyPolicy (and what it needs) the scenario applies:
	// the form the installed release accepts.
	policy() string
	// upgrade changes a value and rolls the manager and the node agent.
	upgrade(t *testing.T)
	uninstall(t *testing.T)
}

// workloadRoller is an installer whose upgrade changes the sidecar: after it,
// the scenario rolls the workload as docs/install.md says (Rolling the
// sidecars after an upgrade) and checks the new pods run this release's.
type workloadRoller interface {
	sidecarVersion() string
}

type helmInstaller struct{ e env }

func (h helmInstaller) name() string { return "helm" }
func (h helmInstaller) chart() string {
	return filepath.Join(h.e.Root, "charts", "heatsink")
}
func (h helmInstaller) policy() string { return policyYAML }
func (h helmInstaller) install(t *testing.T) {
	// With the capture (docs/capture.md): the node agent also counts pods
	// without the sidecar (uninjectedScenario).
	run(t, nil, h.e.Helm, "install", "heatsink", h.chart(), "--namespace", systemNamespace, "--create-namespace",
		"--set", "nodeAgent.capture.enabled=true", "--wait", "--timeout", "5m")
}
func (h helmInstaller) upgrade(t *testing.T) {
	run(t, nil, h.e.Helm, "upgrade", "heatsink", h.chart(), "--namespace", systemNamespace, "--reuse-values",
		"--set", "manager.logLevel=debug", "--set", "nodeAgent.podAnnotations.e2e/upgraded=yes", "--wait", "--timeout", "5m")
}
func (h helmInstaller) uninstall(t *testing.T) {
	run(t, nil, h.e.Helm, "uninstall", "heatsink", "--namespace", systemNamespace, "--wait", "--timeout", "3m")
	// Helm never deletes the CRDs it installed from crds/: a user who
	// uninstalls for good deletes them (and so every policy left).
	kubectl(t, nil, "delete", "crd", "hotkeypolicies.heatsink.dev", "hotkeyreports.heatsink.dev",
		"clusterredistargets.heatsink.dev", "--ignore-not-found", "--timeout=60s")
	kubectl(t, nil, "delete", "namespace", systemNamespace, "--timeout=60s")
}

type kustomizeInstaller struct{ e env }

func (k kustomizeInstaller) name() string   { return "kustomize" }
func (k kustomizeInstaller) dir() string    { return filepath.Join(k.e.Root, "config", "default") }
func (k kustomizeInstaller) policy() string { return policyYAML }
func (k kustomizeInstaller) install(t *testing.T) {
	kubectl(t, nil, "apply", "--server-side", "-k", k.dir())
	kubectl(t, nil, "-n", systemNamespace, "rollout", "status", "deployment/heatsink-manager", "--timeout=300s")
	kubectl(t, nil, "-n", systemNamespace, "rollout", "status", "daemonset/heatsink-node-agent", "--timeout=300s")
}

// upgrade applies an overlay of config/default that changes the pods'
// templates, as a GitOps change would.
func (k kustomizeInstaller) upgrade(t *testing.T) {
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, k.dir())
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf(`resources: [%q]
patches:
- target: {kind: Deployment, name: heatsink-manager}
  patch: |-
    - {op: add, path: /spec/template/metadata/annotations/e2e~1upgraded, value: "yes"}
- target: {kind: DaemonSet, name: heatsink-node-agent}
  patch: |-
    - {op: add, path: /spec/template/metadata/annotations/e2e~1upgraded, value: "yes"}
`, rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, nil, "apply", "--server-side", "-k", dir)
	kubectl(t, nil, "-n", systemNamespace, "rollout", "status", "deployment/heatsink-manager", "--timeout=300s")
	kubectl(t, nil, "-n", systemNamespace, "rollout", "status", "daemonset/heatsink-node-agent", "--timeout=300s")
}
func (k kustomizeInstaller) uninstall(t *testing.T) {
	kubectl(t, nil, "delete", "-k", k.dir(), "--timeout=180s")
}

// scenario is one install method's run.
func scenario(t *testing.T, e env, c client.Client, m installer, masters []string, rep *report) {
	ctx := context.Background()
	name := m.name()
	rep.step(t, name+": install", func() { m.install(t) })
	flushAll(t, masters)

	rep.step(t, name+": application namespace, RBAC", func() { kubectl(t, render(appYAML, e), "apply", "-f", "-") })
	// The webhooks serve once the manager's certificates are in place: a
	// user's first apply may be refused until then, and so is retried.
	rep.step(t, name+": kubectl apply HotKeyPolicy (until the webhook admits it)", func() {
		if err := eventually.PollEvery(ctx, time.Second, 2*time.Minute, func() error {
			_, err := runErr([]byte(m.policy()), "kubectl", "apply", "-f", "-")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
	obs := newObserver(t, ctx, appNamespace, policyName)

	rep.step(t, name+": annotated Deployment rolled out with sidecars", func() {
		kubectl(t, render(deploymentYAML, e), "apply", "-f", "-")
		kubectl(t, nil, "-n", appNamespace, "rollout", "status", "deployment/app", "--timeout=300s")
	})
	pods := appPods(t, c)
	for _, p := range pods {
		checkSidecar(t, p)
	}

	smp := observe.NewSampler(masters)
	defer smp.Close()
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go smp.Run(sctx, time.Now())
	// Baseline: background traffic only.
	eventually.Succeeds(t, time.Minute, func() error { return smp.AtLeast(6) })
	baseline := len(smp.Samples())

	readKey, counter := "product:viral", "likes:viral"
	spike := time.Now()
	for _, p := range pods {
		post(t, p.Status.PodIP, "/viral")
	}
	var routed map[string]time.Time
	rep.step(t, name+": viral keys detected and routed", func() {
		eventually.Succeeds(t, 3*time.Minute, func() error {
			routed = routedAt(obs.Snapshot(), readKey, counter)
			if len(routed) < 2 {
				return fmt.Errorf("routed so far: %v", routed)
			}
			return nil
		})
	})
	// Relief as Redis sees it: the busiest master within 1.4x of the mean
	// for five seconds in a row (background keys alone give 1.05-1.2).
	var relief time.Time
	rep.step(t, name+": relief seen in Redis INFO", func() {
		eventually.Succeeds(t, 3*time.Minute, func() error {
			var ok bool
			relief, ok = calm(smp.Samples(), spike, 1.4, 5)
			if !ok {
				return fmt.Errorf("not calm yet; last ratios %v", lastRatios(smp.Samples(), 8))
			}
			return nil
		})
	})
	waitSamples(t, smp, 10)
	samples := smp.Samples()
	before, peak := ratios(samples[baseline:], spike, relief)
	after, _ := ratios(samples, relief, time.Time{})
	det := detectedAt(obs.Snapshot(), readKey, counter)
	for _, k := range []string{readKey, counter} {
		rep.add("| %s: %s spike → detected / routed | %s / %s |", name, k, sub(det[k], spike), sub(routed[k], spike))
	}
	rep.add("| %s: spike → relief in INFO (busiest ≤ 1.4× mean, 5 s) | %s |", name, relief.Sub(spike).Round(100*time.Millisecond))
	rep.add("| %s: busiest master ÷ mean before relief (peak) / after | %.2f (%.2f) / %.2f |", name, before, peak, after)
	if after >= before {
		t.Errorf("no relief: busiest ÷ mean %.2f before, %.2f after", before, after)
	}
	errsBefore := workloadErrors(t, pods)
	tableBefore := obs.Snapshot().Table

	upgradeStart := time.Now()
	rep.step(t, name+": upgrade with a changed value, traffic on", func() { m.upgrade(t) })
	// The new manager acts once it holds the leader lease; until then no
	// policy is reconciled (the old one's lease has to be released or expire).
	var led time.Time
	rep.step(t, name+": new manager pod leads", func() { led = newLeader(t, c, upgradeStart) })
	rep.add("| %s: upgrade start → new manager leads | %s |", name, led.Sub(upgradeStart).Round(100*time.Millisecond))
	// Traffic goes on for ten more seconds through the rolled components.
	waitSamples(t, smp, 10)
	if lost := lostKeys(obs.Snapshot()); len(lost) > 0 {
		t.Errorf("the routing table lost %v during the upgrade", lost)
	}
	tableAfter := obs.Snapshot().Table
	for _, k := range []string{readKey, counter} {
		if tableAfter == nil || tableAfter.Lookup(k) == nil {
			t.Errorf("after the upgrade the routing table has no entry for %s", k)
		}
	}
	if tableBefore != nil && tableAfter != nil && tableAfter.Version < tableBefore.Version {
		t.Errorf("routing table version went back from %d to %d", tableBefore.Version, tableAfter.Version)
	}
	if got := workloadErrors(t, pods); got != errsBefore {
		t.Errorf("clients saw errors during the upgrade: %d before, %d after", errsBefore, got)
	}
	rep.add("| %s: upgrade: table entries kept / client errors added | %d→%d / %d |", name,
		entries(tableBefore), entries(tableAfter), workloadErrors(t, pods)-errsBefore)

	// Restarts and memory, with everything warm.
	rss := residentMemory(t, e, c)
	for _, k := range sortedKeys(rss) {
		rep.add("| %s: RSS %s | %s |", name, k, rss[k])
	}

	var acked, value int64
	if r, ok := m.(workloadRoller); ok {
		pods, acked = rollWorkload(t, c, obs, smp, r.sidecarVersion(), pods, name, rep)
	}
	rep.step(t, name+": traffic stopped, counter read through a sidecar", func() {
		for _, p := range pods {
			s := post(t, p.Status.PodIP, "/stop")
			acked += s.IncrAcked
			if s.IncrErrors > 0 || s.GetErrors > 0 || s.ViralGetErrors > 0 {
				t.Errorf("pod %s: errors: %+v", p.Name, s)
			}
			if s.CounterReadError != "" {
				t.Errorf("pod %s: reading the counter: %s", p.Name, s.CounterReadError)
			}
			value = s.CounterRead
		}
	})
	exact := "EXACT"
	if value != acked {
		exact = "NOT EXACT"
		t.Errorf("counter %s = %d, acknowledged INCRs %d", counter, value, acked)
	}
	rep.add("| %s: counter exactness | %s: %d = %d acknowledged INCRs |", name, exact, value, acked)
	stopSampling()
	writeSamples(t, filepath.Join(e.Out, "samples-"+name+".csv"), smp.Samples(), spike)
	rep.add("| %s: pod restarts | %s |", name, restarts(t, c))
	rep.add("| %s: Warning events (out/e2e/%s-events.txt) | %d |", name, name, saveDiagnostics(t, e, name))

	rep.step(t, name+": Deployment deleted", func() {
		kubectl(t, nil, "-n", appNamespace, "delete", "deployment", "app", "--wait", "--timeout=120s")
	})
	rep.step(t, name+": HotKeyPolicy deleted (drain, finalizer)", func() {
		kubectl(t, nil, "-n", appNamespace, "delete", "hotkeypolicy", policyName, "--wait", "--timeout=120s")
	})
	// After the policy above is gone: a pod without the sidecar counts for
	// every policy of its namespace whose Redis it talks to, and the
	// scenario counts its commands for one.
	if name == "helm" {
		uninjectedScenario(t, e, c, masters, rep)
	}
	rep.step(t, name+": heatsink uninstalled", func() { m.uninstall(t) })
	rep.step(t, name+": application namespace deleted (nothing stuck)", func() {
		kubectl(t, nil, "delete", "namespace", appNamespace, "--wait", "--timeout=120s")
	})
	checkNothingLeft(t)
}

// newLeader waits until a manager pod that exists now holds the leader lease
// acquired after since, and returns when it was acquired.
func newLeader(t *testing.T, c client.Client, since time.Time) time.Time {
	var at time.Time
	err := eventually.PollEvery(context.Background(), time.Second, 3*time.Minute, func() error {
		var l coordinationv1.Lease
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: systemNamespace, Name: "heatsink-manager.heatsink.dev"}, &l); err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || l.Spec.AcquireTime == nil {
			return fmt.Errorf("lease has no holder")
		}
		var pl corev1.PodList
		if err := c.List(context.Background(), &pl, client.InNamespace(systemNamespace), client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil {
			return err
		}
		for _, p := range pl.Items {
			if p.DeletionTimestamp == nil && strings.HasPrefix(*l.Spec.HolderIdentity, p.Name+"_") && l.Spec.AcquireTime.Time.After(since.Add(-time.Second)) {
				at = l.Spec.AcquireTime.Time
				return nil
			}
		}
		return fmt.Errorf("lease held by %s since %s", *l.Spec.HolderIdentity, l.Spec.AcquireTime.Time)
	})
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// saveDiagnostics writes the Warning events and the logs of heatsink's
// containers to E2E_OUT, and returns how many Warning events there were.
func saveDiagnostics(t *testing.T, e env, name string) int {
	events, _ := runErr(nil, "kubectl", "get", "events", "-A", "--field-selector", "type=Warning",
		"-o", "custom-columns=NS:.metadata.namespace,OBJECT:.involvedObject.name,REASON:.reason,COUNT:.count,MESSAGE:.message", "--no-headers")
	_ = os.WriteFile(filepath.Join(e.Out, name+"-events.txt"), []byte(events), 0o644)
	for file, args := range map[string][]string{
		"manager":    {"-n", systemNamespace, "logs", "deployment/heatsink-manager", "--all-containers"},
		"node-agent": {"-n", systemNamespace, "logs", "daemonset/heatsink-node-agent", "--all-containers"},
		"sidecar":    {"-n", appNamespace, "logs", "deployment/app", "-c", "heatsink-proxy"},
	} {
		out, err := runErr(nil, "kubectl", args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		_ = os.WriteFile(filepath.Join(e.Out, name+"-"+file+".log"), []byte(out), 0o644)
	}
	n := 0
	for _, l := range strings.Split(events, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// writeSamples writes the per-second load of every master, from the spike.
func writeSamples(t *testing.T, file string, smp []observe.Sample, spike time.Time) {
	var b strings.Builder
	b.WriteString("seconds_since_spike,ops_per_master...,busiest_over_mean\n")
	for _, x := range smp {
		fmt.Fprintf(&b, "%.1f", x.At.Sub(spike).Seconds())
		for _, v := range x.OpsPerSec {
			fmt.Fprintf(&b, ",%.0f", v)
		}
		fmt.Fprintf(&b, ",%.2f\n", x.Ratio())
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitSamples waits for n more seconds of samples.
func waitSamples(t *testing.T, smp *observe.Sampler, n int) {
	t.Helper()
	want := len(smp.Samples()) + n
	eventually.Succeeds(t, time.Duration(n)*time.Second+time.Minute, func() error { return smp.AtLeast(want) })
}

func sub(a, b time.Time) string {
	if a.IsZero() {
		return "never"
	}
	return a.Sub(b).Round(100 * time.Millisecond).String()
}

func entries(t *routing.Table) int {
	if t == nil {
		return 0
	}
	return len(t.Entries)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func flushAll(t *testing.T, masters []string) {
	for _, a := range masters {
		r := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true})
		if err := r.FlushAll(context.Background()).Err(); err != nil {
			t.Fatalf("FLUSHALL %s: %v", a, err)
		}
		r.Close()
	}
}

func appPods(t *testing.T, c client.Client) []corev1.Pod {
	var pl corev1.PodList
	if err := c.List(context.Background(), &pl, client.InNamespace(appNamespace), client.MatchingLabels{"app": "app"}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pl.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d running app pods, want 2", len(out))
	}
	return out
}

// checkSidecar: the injected proxy is a native sidecar that started, is
// ready, and started before the application.
func checkSidecar(t *testing.T, p corev1.Pod) {
	t.Helper()
	var proxy *corev1.ContainerStatus
	for i, s := range p.Status.InitContainerStatuses {
		if s.Name == "heatsink-proxy" {
			proxy = &p.Status.InitContainerStatuses[i]
		}
	}
	if proxy == nil {
		t.Fatalf("pod %s has no heatsink-proxy sidecar (init containers: %v)", p.Name, p.Spec.InitContainers)
	}
	if !proxy.Ready || proxy.State.Running == nil {
		t.Errorf("pod %s: sidecar not running and ready: %+v", p.Name, proxy.State)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "app" && s.State.Running != nil && s.State.Running.StartedAt.Before(&proxy.State.Running.StartedAt) {
			t.Errorf("pod %s: app started before the sidecar", p.Name)
		}
	}
}

type workloadStats struct {
	Gets, GetErrors, ViralGets, ViralGetErrors, IncrAcked, IncrErrors int64
	LastError, CounterReadError                                       string
	CounterRead                                                       int64
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func post(t *testing.T, ip, path string) workloadStats {
	t.Helper()
	resp, err := httpClient.Post("http://"+ip+":8080"+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s workloadStats
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func workloadErrors(t *testing.T, pods []corev1.Pod) int64 {
	var n int64
	for _, p := range pods {
		resp, err := httpClient.Get("http://" + p.Status.PodIP + ":8080/stats")
		if err != nil {
			t.Fatal(err)
		}
		var s workloadStats
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += s.GetErrors + s.ViralGetErrors + s.IncrErrors
		if s.LastError != "" {
			t.Logf("pod %s: last error: %s", p.Name, s.LastError)
		}
	}
	return n
}

// restarts lists every pod's container restarts in the namespaces of the run.
func restarts(t *testing.T, c client.Client) string {
	var out []string
	total := int32(0)
	for _, ns := range []string{systemNamespace, appNamespace, redisNamespace} {
		var pl corev1.PodList
		if err := c.List(context.Background(), &pl, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pl.Items {
			for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				total += s.RestartCount
				if s.RestartCount > 0 {
					out = append(out, fmt.Sprintf("%s/%s/%s=%d", ns, p.Name, s.Name, s.RestartCount))
				}
			}
		}
	}
	if total > 0 {
		t.Errorf("containers restarted: %v", out)
		return fmt.Sprintf("%d (%s)", total, strings.Join(out, ", "))
	}
	return "0"
}

// residentMemory reads the RSS of the sidecars', the node agent's and the
// manager's processes from /proc, finding their PIDs through containerd.
func residentMemory(t *testing.T, e env, c client.Client) map[string]string {
	pids := map[string]string{} // container ID → PID
	out := run(t, nil, e.Ctr, "--address", e.CtrAddress, "-n", "k8s.io", "tasks", "ls")
	for _, l := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 2 {
			pids[f[0]] = f[1]
		}
	}
	res := map[string]string{}
	for _, ns := range []string{systemNamespace, appNamespace} {
		var pl corev1.PodList
		if err := c.List(context.Background(), &pl, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pl.Items {
			for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if s.Name == "app" {
					continue
				}
				id := strings.TrimPrefix(s.ContainerID, "containerd://")
				status, err := os.ReadFile("/proc/" + pids[id] + "/status")
				if pids[id] == "" || err != nil {
					continue
				}
				for _, l := range strings.Split(string(status), "\n") {
					if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
						res[s.Name+" ("+p.Name+")"] = strings.TrimSpace(v)
					}
				}
			}
		}
	}
	return res
}

// checkNothingLeft: no heatsink object is left in the cluster.
func checkNothingLeft(t *testing.T) {
	for _, args := range [][]string{
		{"get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"},
		{"get", "clusterroles,clusterrolebindings", "-o", "name"},
		{"get", "namespaces", "-o", "name"},
	} {
		out := kubectl(t, nil, args...)
		for _, l := range strings.Fields(out) {
			if strings.Contains(l, "heatsink") || strings.HasSuffix(l, "/"+appNamespace) {
				t.Errorf("left after uninstall: %s", l)
			}
		}
	}
}
