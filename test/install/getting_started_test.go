package install

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/testing/docblock"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/heatsinkbin"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
	"github.com/heatsink-dev/heatsink/webhook"
)

const (
	gsNode      = "node-a"
	gsToken     = "getting-started"
	gsRedisName = "redis.shop.svc" // the page's Service, resolved by the test's agent
	gsHotKey    = "product:viral-1"
)

// TestGettingStartedAsDocumented runs docs/getting-started.md in order:
// helm install with the capture on, an Observe policy (admitted by the
// real policy webhook), the top keys of an application without a sidecar,
// then enforcing for its workload (the injection webhook injects it).
//
// A control plane without nodes runs no Pods, so the test stands in for
// them: the manager (reconciler, hub, both webhooks) and one node agent run
// in this process. The agent's capture is real: it watches the interfaces
// of a "node" (the observer network namespace, internal/testing/netns)
// routing between go-redis clients with no sidecar and a real
// redis-server, so the report is made of captured packets, not injected
// counts. The application's Pod is written by the test with the client's
// address, as a kubelet would report it; its Deployment likewise (the page
// assumes the application exists).
func TestGettingStartedAsDocumented(t *testing.T) {
	// Without network namespaces (root, ip) or redis-server there is no
	// traffic to capture: every other block still runs, and the test is
	// marked skipped at the end, naming the blocks it could not run.
	noCapture := netns.Available()
	if _, err := exec.LookPath("redis-server"); noCapture == nil && err != nil {
		noCapture = fmt.Errorf("needs redis-server (make redis)")
	}
	l := newLifecycle(t)
	l.docs = docblock.Load(t, l.sh.Dir, "docs/getting-started.md")
	l.sh.Tools["heatsink"] = heatsinkbin.Path(t)
	ctx := l.ctx

	// The node: Redis in the server namespace, the application's
	// clients in the client namespace, the capture on the observer's
	// interfaces (the node's), opened before anything is sent.
	var n *netns.Net
	var c *capture.Capture
	if noCapture == nil {
		n, c = captureNode(t)
	}

	hubAddr := startGettingStartedManager(t, l)
	l.run(t, "gs-install")
	l.pointWebhooksAtManager(t)
	if !isCaptureDaemonSet(t, l) {
		t.Fatal("the documented helm install did not turn the node agent's capture on")
	}
	if c != nil {
		startCapturingAgent(t, hubAddr, c)
	}

	// The application as it runs before the page: no sidecar, Redis by
	// its Service name; its one Pod on the node, at the client's address.
	if err := l.cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	createApplication(t, l)
	// Its Redis' Service, which the page's policy names (serviceRef):
	// headless and without EndpointSlices here (no controller makes them),
	// so the capture's scope is the name the test's agent resolves, as
	// before the Service existed.
	redisSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "redis"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "redis"}, Ports: []corev1.ServicePort{{Port: 6379}}}}
	if err := l.cp.Client.Create(ctx, redisSvc); err != nil {
		t.Fatal(err)
	}

	out := l.run(t, "gs-policy")
	if !strings.Contains(out, "catalogue") || !strings.Contains(out, "Observe") {
		t.Errorf("kubectl get hotkeypolicy does not show the Observe policy:\n%s", out)
	}
	if c != nil {
		seeTopKeys(t, l, n, c)
	}

	l.run(t, "gs-enforce")
	p := &v1alpha1.HotKeyPolicy{}
	if err := l.cp.Client.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Mode != v1alpha1.ModeEnforce {
		t.Errorf("the policy's mode after the documented patch: %q", p.Spec.Mode)
	}
	checkInjected(t, l)
	if noCapture != nil {
		t.Skip("blocks gs-top and gs-top-json not run (no traffic to capture): " + noCapture.Error())
	}
}

// captureNode builds the node: network namespaces, redis-server in the
// server's, the capture open on the observer's interfaces.
func captureNode(t *testing.T) (*netns.Net, *capture.Capture) {
	t.Helper()
	n, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	stopRedis, err := netns.StartRedis(n.Server, netns.ServerIP, 6379)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopRedis)
	var c *capture.Capture
	if err := netns.Do(n.Observer, func() (err error) {
		c, err = capture.Open(capture.Config{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n, c
}

// seeTopKeys sends the application's traffic until the report lists its
// viral key, then runs the page's blocks that show it.
func seeTopKeys(t *testing.T, l *lifecycle, n *netns.Net, c *capture.Capture) {
	t.Helper()
	eventually.True(t, 30*time.Second, "the capture's scope names the Service's address and the pod without a sidecar", func() bool {
		s := c.Stats()
		return s.Targets == 1 && s.Endpoints == 1 && s.Pods == 1
	})
	load := sendUntilReported(t, l, n)
	t.Logf("sent %d reads and %d writes in %s", load.reads, load.writes, load.took.Round(time.Millisecond))

	out := l.run(t, "gs-top")
	if !strings.Contains(out, "key: "+gsHotKey) || !strings.Contains(out, "policyName: catalogue") {
		t.Errorf("kubectl get hotkeyreport -o yaml does not list %s:\n%s", gsHotKey, out)
	}
	if !strings.Contains(out, "Observe (moves not applied)") || !strings.Contains(out, gsHotKey) || !strings.Contains(out, "Coalesce+Cache") {
		t.Errorf("heatsink top does not show %s under the Observe policy with the moves it would get:\n%s", gsHotKey, out)
	}
	t.Logf("the page's gs-top block printed:\n%s", out)
	out = l.run(t, "gs-top-json")
	t.Logf("the page's gs-top-json block printed:\n%s", out)
	var view struct {
		Policies []struct {
			Mode string `json:"mode"`
			Keys []struct {
				Key            string `json:"key"`
				ReadsPerSecond int64  `json:"readsPerSecond"`
			} `json:"keys"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &view); err != nil || len(view.Policies) != 1 {
		t.Fatalf("heatsink top -o json: %v\n%s", err, out)
	}
	found := false
	for _, k := range view.Policies[0].Keys {
		found = found || (k.Key == gsHotKey && k.ReadsPerSecond > 0)
	}
	if !found || view.Policies[0].Mode != string(v1alpha1.ModeObserve) {
		t.Errorf("heatsink top -o json does not list %s with its reads under mode Observe:\n%s", gsHotKey, out)
	}

	// As the page says: a manager that cannot reach Redis (here: the
	// Service name resolves for the node agent only) learns no capacity,
	// which does not degrade the policy, and the report above was written
	// all the same.
	pol := &v1alpha1.HotKeyPolicy{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue"}, pol); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(pol.Status.Conditions, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("the policy's Degraded condition while only the capacity sample fails: %+v", c)
	}
}

// startGettingStartedManager runs the manager as the chart with the
// capture configures it (--capture-pods: every pod cached and listed to
// the agents, Services and EndpointSlices watched), with both webhooks, and
// returns the hub's address.
func startGettingStartedManager(t *testing.T, l *lifecycle) string {
	t.Helper()
	opts := l.cp.ManagerOptions()
	byObject := controllers.EndpointCacheOptions()
	byObject[&corev1.Pod{}] = controllers.PodCacheOptionsFor(true)
	opts.Cache = cache.Options{ByObject: byObject}
	mgr, err := ctrl.NewManager(l.cp.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: gsToken, WarmUp: -1})
	if err != nil {
		t.Fatal(err)
	}
	// As installed: no raw addresses (the page's policy names a Service).
	if err := webhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := webhook.SetupInjectionWebhook(mgr, webhook.InjectorConfig{Image: "ghcr.io/heatsink-dev/heatsink:test",
		Resources: webhook.DefaultProxyResources(), NodeAgentAddress: "heatsink-node-agent.heatsink-system.svc:7946"}); err != nil {
		t.Fatal(err)
	}
	r := &controllers.HotKeyPolicyReconciler{SkipNameValidation: true, RedisTimeout: 2 * time.Second, Fleet: h, CapturePods: true}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	checker := mgr.GetWebhookServer().StartedChecker()
	if err := eventually.Poll(ctx, 30*time.Second, func() error { return checker(nil) }); err != nil {
		t.Fatalf("webhook server not serving: %v", err)
	}
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	addr, err := h.Addr(actx)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// isCaptureDaemonSet says whether the installed node agent captures.
func isCaptureDaemonSet(t *testing.T, l *lifecycle) bool {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: namespace, Name: "heatsink-node-agent"}, ds); err != nil {
		t.Fatal(err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if a == "--capture" {
				return ds.Spec.Template.Spec.HostNetwork
			}
		}
	}
	return false
}

// startCapturingAgent runs the node's agent, with the capture, reaching
// the in-process hub; the page's Service name resolves to the Redis of
// the server namespace, as cluster DNS would give its ClusterIP.
func startCapturingAgent(t *testing.T, hubAddr string, c *capture.Capture) {
	t.Helper()
	a, err := nodeagent.New(nodeagent.Options{NodeName: gsNode, ListenAddr: "127.0.0.1:0", Manager: hubAddr, Token: gsToken,
		Capture: c, Resolve: func(ctx context.Context, host string) ([]string, error) {
			if host == gsRedisName {
				return []string{netns.ServerIP}, nil
			}
			return net.DefaultResolver.LookupHost(ctx, host)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, 30*time.Second, "the node agent follows the manager", func() bool { return a.Stats().Connected })
}

// createApplication writes the application the page assumes: its
// Deployment (no sidecar, Redis by Service name) and the one Pod a
// kubelet would run on the node, at the client namespace's address.
func createApplication(t *testing.T, l *lifecycle) {
	t.Helper()
	labels := map[string]string{"app": "catalogue"}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/catalogue:1.4",
		Env: []corev1.EnvVar{{Name: "REDIS_ADDR", Value: gsRedisName + ":6379"}}}}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}}}
	if err := l.cp.Client.Create(l.ctx, d); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue-5d8c7b9f4-x2x7q", Labels: labels}, Spec: podSpec}
	pod.Spec.NodeName = gsNode
	if err := l.cp.Client.Create(l.ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: netns.ClientIP}
	if err := l.cp.Client.Status().Update(l.ctx, pod); err != nil {
		t.Fatal(err)
	}
}

type loadDone struct {
	reads, writes int
	took          time.Duration
}

// sendUntilReported is the application's traffic: real go-redis clients
// from the pod's address, pipelines of GETs of one viral product (about
// 7,000/s: over the fallback threshold of 5,000/s, since the manager
// cannot reach Redis to learn its capacity here) among quieter keys and a
// few writes, until the manager's report lists the viral key and the
// policy's status says what Observe would do to it. Bounded: at most 45 s
// and 450 rounds.
func sendUntilReported(t *testing.T, l *lifecycle, n *netns.Net) loadDone {
	t.Helper()
	r := redis.NewClient(&redis.Options{Addr: netns.ServerIP + ":6379", Dialer: netns.Dialer(n.Client, netns.ClientIP), PoolSize: 4})
	defer r.Close()
	ctx, cancel := context.WithTimeout(l.ctx, 45*time.Second)
	defer cancel()
	began := time.Now()
	var out loadDone
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for round := 0; round < 450; round++ {
		pipe := r.Pipeline()
		for range 700 {
			pipe.Get(ctx, gsHotKey)
		}
		for i := range 20 {
			pipe.Get(ctx, fmt.Sprintf("product:%d", (round*20+i)%500))
		}
		pipe.Set(ctx, "product:viral-1:views", round, 0)
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatalf("the application's traffic: %v", err)
		}
		out.reads, out.writes = out.reads+720, out.writes+1
		if round%5 == 4 && reportLists(l, gsHotKey) && wouldMove(l, gsHotKey) {
			out.took = time.Since(began)
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no HotKeyReport listed %s after %d reads sent over %s", gsHotKey, out.reads, time.Since(began))
		case <-tick.C:
		}
	}
	t.Fatalf("no HotKeyReport listed %s after %d rounds", gsHotKey, out.reads/720)
	return out
}

// wouldMove says whether the policy's status lists key as hot (in Observe
// mode: the moves Enforce would apply).
func wouldMove(l *lifecycle, key string) bool {
	p := &v1alpha1.HotKeyPolicy{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue"}, p); err != nil {
		return false
	}
	for _, k := range p.Status.HotKeys {
		if k.Key == key && len(k.Mitigations) > 0 {
			return true
		}
	}
	return false
}

func reportLists(l *lifecycle, key string) bool {
	rep := &v1alpha1.HotKeyReport{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue"}, rep); err != nil {
		return false
	}
	for _, c := range rep.Spec.Candidates {
		if c.Key == key {
			return true
		}
	}
	return false
}

// checkInjected checks the documented patch: the Deployment's template
// asks for the sidecar and points the app at it, and a Pod made from that
// template, as its ReplicaSet would make it, is given the sidecar by the
// injection webhook (a server-side dry run: admission runs, nothing is
// stored).
func checkInjected(t *testing.T, l *lifecycle) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := l.cp.Client.Get(l.ctx, types.NamespacedName{Namespace: "shop", Name: "catalogue"}, d); err != nil {
		t.Fatal(err)
	}
	tpl := d.Spec.Template
	if tpl.Annotations[webhook.InjectAnnotation] != "catalogue" {
		t.Errorf("the pod template's annotations after the documented patch: %v", tpl.Annotations)
	}
	if len(tpl.Spec.Containers) != 1 || len(tpl.Spec.Containers[0].Env) != 1 || tpl.Spec.Containers[0].Env[0].Value != "127.0.0.1:6380" {
		t.Errorf("the app's containers after the documented patch: %+v", tpl.Spec.Containers)
	}
	pod := &corev1.Pod{ObjectMeta: *tpl.ObjectMeta.DeepCopy(), Spec: *tpl.Spec.DeepCopy()}
	pod.Namespace, pod.Name = "shop", "catalogue-6f9d8c7b5-k4m2p"
	if err := l.cp.Client.Create(l.ctx, pod, client.DryRunAll); err != nil {
		t.Fatalf("a pod of the patched template is refused: %v", err)
	}
	injected := false
	for _, c := range pod.Spec.InitContainers {
		injected = injected || c.Name == webhook.ProxyContainerName
	}
	if !injected || pod.Annotations[webhook.InjectedAnnotation] != "catalogue" || pod.Labels[v1alpha1.LabelPolicy] != "catalogue" {
		t.Errorf("the injection webhook did not inject a pod of the patched template: init containers %v, annotations %v, labels %v",
			pod.Spec.InitContainers, pod.Annotations, pod.Labels)
	}
}
