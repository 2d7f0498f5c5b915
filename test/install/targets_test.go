package install

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/webhook"
)

// managerSA is the manager's ServiceAccount as the chart names it; the
// test's managers act as it, with the chart's rules.
const managerSA = "system:serviceaccount:" + namespace + ":heatsink-manager"

// asUser is a client config acting as user (and groups), with the rights
// RBAC gives them.
func asUser(cp *controlplane.ControlPlane, user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// runManagerAs starts a manager acting as the manager's ServiceAccount until
// the test ends, after setup registered its parts; with webhooks it waits
// for them to serve.
func runManagerAs(t *testing.T, cp *controlplane.ControlPlane, webhooks bool, setup func(manager.Manager) error) {
	t.Helper()
	cfg := asUser(cp, managerSA, "system:serviceaccounts", "system:serviceaccounts:"+namespace, "system:authenticated")
	mgr, err := ctrl.NewManager(cfg, cp.ManagerOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("manager stopped: %v", err)
		}
	})
	if webhooks {
		checker := mgr.GetWebhookServer().StartedChecker()
		if err := eventually.Poll(ctx, 30*time.Second, func() error { return checker(nil) }); err != nil {
			t.Fatalf("webhook server not serving: %v", err)
		}
	}
}

// connections is a Redis server's count of connections it accepted, read on
// one connection kept open (so reading it adds nothing).
type connections struct{ c *redis.Client }

func watchConnections(t *testing.T, addr string) *connections {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MinIdleConns: 1})
	t.Cleanup(func() { _ = c.Close() })
	return &connections{c: c}
}

func (c *connections) received(t *testing.T) int64 {
	t.Helper()
	info, err := c.c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_connections_received in INFO stats")
	return 0
}

func targetAllowed(p *v1alpha1.HotKeyPolicy) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionTargetAllowed)
}

// TestTenantReachesOnlyAllowedRedis: a user with edit in namespace team-a
// (the built-in role and heatsink's aggregated rules, bound as RBAC binds
// them) cannot make the manager connect to team-b's Redis: raw addresses,
// a ClusterRedisTarget for team-b only and an ExternalName Service are
// refused at admission with the rule named, and a policy admitted while its
// target allowed team-a gets TargetAllowed False once the platform team
// revoked it, with no connection to that Redis; a target that allows team-a
// works. The managers act as the chart's manager ServiceAccount, with the
// chart's RBAC, and run without raw addresses, as an install does by
// default.
func TestTenantReachesOnlyAllowedRedis(t *testing.T) {
	tl := findTools(t)
	cp := testenv.Start(t, controlplane.Options{Webhooks: true})
	ctx := context.Background()
	redisA, redisB := redistest.Standalone(t), redistest.Standalone(t)
	connsA, connsB := watchConnections(t, redisA.Addr), watchConnections(t, redisB.Addr)

	for _, ns := range []string{"team-a", "team-b"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	// alice: edit in team-a. A bare API server runs no aggregation
	// controller, so the built-in edit is empty here: she gets the roles
	// it aggregates (the built-in ones and heatsink's), bound as edit is.
	for _, role := range []string{"system:aggregate-to-edit", "system:aggregate-to-view", "heatsink-edit"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice-" + strings.ReplaceAll(role, ":", "-")},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
		if err := cp.Client.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	applyRBAC(t, cp, helmTemplate(t, tl, nil)) // and waits for RBAC to be in force
	alice, err := client.New(asUser(cp, "alice"), client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The platform team's targets: team-b's Redis for team-b, team-a's for
	// team-a, and "moving", team-b's Redis still allowed to team-a.
	newTarget := func(name, addr string, namespaces ...string) *v1alpha1.ClusterRedisTarget {
		ct := &v1alpha1.ClusterRedisTarget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterRedisTargetSpec{
			Addresses: []string{addr}, AllowedNamespaces: v1alpha1.AllowedNamespaces{Names: namespaces}}}
		if err := cp.Client.Create(ctx, ct); err != nil {
			t.Fatal(err)
		}
		return ct
	}
	newTarget("team-b-redis", redisB.Addr, "team-b")
	newTarget("team-a-redis", redisA.Addr, "team-a")
	moving := newTarget("moving", redisB.Addr, "team-a", "team-b")
	if err := alice.List(ctx, &v1alpha1.ClusterRedisTargetList{}); err == nil {
		t.Error("a namespace editor can list ClusterRedisTargets: they are the platform team's")
	}
	if err := alice.Create(ctx, &v1alpha1.ClusterRedisTarget{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: v1alpha1.ClusterRedisTargetSpec{
		Addresses: []string{redisB.Addr}, AllowedNamespaces: v1alpha1.AllowedNamespaces{Names: []string{"team-a"}}}}); err == nil {
		t.Error("a namespace editor created a ClusterRedisTarget")
	}
	external := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "elsewhere"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Port: int32(redisB.Port)}}}}
	if err := alice.Create(ctx, external); err != nil {
		t.Fatalf("an editor cannot create a Service in its namespace: %v", err)
	}

	// Admission only, first: the policy webhook as the manager serves it.
	runManagerAs(t, cp, true, func(mgr manager.Manager) error { return webhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{}) })
	policy := func(name string, target v1alpha1.RedisTarget) *v1alpha1.HotKeyPolicy {
		return &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Spec: v1alpha1.HotKeyPolicySpec{Mode: v1alpha1.ModeObserve, Target: target,
				Thresholds: v1alpha1.Thresholds{Auto: &v1alpha1.AutoThresholds{}}}}
	}
	for name, tc := range map[string]struct {
		target v1alpha1.RedisTarget
		want   []string
	}{
		"raw addresses": {v1alpha1.RedisTarget{Addresses: []string{redisB.Addr}},
			[]string{"spec.target.addresses", "raw Redis addresses are disabled by the installer", "rule raw-addresses"}},
		"raw sentinel": {v1alpha1.RedisTarget{Sentinel: &v1alpha1.RedisSentinel{Addresses: []string{redisB.Addr}, MasterName: "mymaster"}},
			[]string{"spec.target.sentinel", "rule raw-addresses"}},
		"another namespace's target": {v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: "team-b-redis"}},
			[]string{`ClusterRedisTarget "team-b-redis" does not allow namespace "team-a"`, "rule cluster-target-allowed-namespaces"}},
		"a target that does not exist": {v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: "nope"}},
			[]string{`ClusterRedisTarget "nope" does not exist`}},
		"an ExternalName Service": {v1alpha1.RedisTarget{ServiceRef: &v1alpha1.ServiceTargetReference{Name: "elsewhere", Port: int32(redisB.Port)}},
			[]string{`Service "elsewhere" is of type ExternalName`, "rule service-in-namespace"}},
	} {
		err := alice.Create(ctx, policy("refused", tc.target))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: admission answered %v, want a refusal with %q", name, err, w)
			}
		}
	}
	if err := alice.Create(ctx, policy("moving", v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: "moving"}})); err != nil {
		t.Fatalf("a target that allows team-a was refused: %v", err)
	}
	if err := alice.Create(ctx, policy("catalogue", v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: "team-a-redis"}})); err != nil {
		t.Fatalf("a target that allows team-a was refused: %v", err)
	}
	// The platform team takes "moving" from team-a after admission.
	moving.Spec.AllowedNamespaces.Names = []string{"team-b"}
	if err := cp.Client.Update(ctx, moving); err != nil {
		t.Fatal(err)
	}
	beforeA, beforeB := connsA.received(t), connsB.received(t)

	// Then the reconciler.
	h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "test", WarmUp: -1})
	if err != nil {
		t.Fatal(err)
	}
	runManagerAs(t, cp, false, func(mgr manager.Manager) error {
		r := &controllers.HotKeyPolicyReconciler{SkipNameValidation: true, RedisTimeout: 2 * time.Second, Fleet: h}
		return r.SetupWithManager(mgr)
	})
	condition := func(name string, want metav1.ConditionStatus) *metav1.Condition {
		t.Helper()
		var c *metav1.Condition
		err := eventually.Poll(ctx, 30*time.Second, func() error {
			p := &v1alpha1.HotKeyPolicy{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, p); err != nil {
				return err
			}
			if c = targetAllowed(p); c == nil || c.Status != want {
				return fmt.Errorf("policy %s: TargetAllowed %+v, want %s", name, c, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := condition("moving", metav1.ConditionFalse)
	if c.Reason != v1alpha1.ReasonTargetNotAllowed || !strings.Contains(c.Message, `ClusterRedisTarget "moving" does not allow namespace "team-a"`) || !strings.Contains(c.Message, "rule "+targets.RuleAllowedNamespaces) {
		t.Errorf("TargetAllowed of the revoked policy: %+v", c)
	}
	// The allowed policy: reconciled (Ready True), no TargetAllowed False.
	if err := eventually.Poll(ctx, 30*time.Second, func() error {
		p := &v1alpha1.HotKeyPolicy{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "catalogue"}, p); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || targetAllowed(p) != nil {
			return fmt.Errorf("policy catalogue: Ready %+v, TargetAllowed %+v", c, targetAllowed(p))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The allowed policy's Redis saw the manager (so the count below can
	// move), team-b's never did.
	if err := eventually.Poll(ctx, 30*time.Second, func() error {
		if n := connsA.received(t); n == beforeA {
			return fmt.Errorf("team-a's Redis saw no connection from the manager")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := connsB.received(t); n != beforeB {
		t.Errorf("team-b's Redis accepted %d connections while only team-a's policies ran", n-beforeB)
	}
}
