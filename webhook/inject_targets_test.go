package webhook_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/webhook"
)

func upstreamEnv(pod *corev1.Pod) (upstream, cluster string) {
	for _, c := range pod.Spec.InitContainers {
		if c.Name != webhook.ProxyContainerName {
			continue
		}
		for _, e := range c.Env {
			switch e.Name {
			case injectlink.EnvUpstream:
				upstream = e.Value
			case injectlink.EnvCluster:
				cluster = e.Value
			}
		}
	}
	return upstream, cluster
}

// TestInjectResolvesTargets: the sidecar connects where the manager does. A
// policy naming a ClusterRedisTarget gets the target's addresses and
// cluster setting; one naming a Service of its namespace (serviceRef, with
// its port) gets the Service's cluster DNS name; a pod of a policy whose
// target no longer allows its namespace is refused with the rule named.
func TestInjectResolvesTargets(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{Webhooks: true})
	testenv.RunManager(t, cp, func(mgr manager.Manager) error {
		if err := webhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{}); err != nil {
			return err
		}
		return webhook.SetupInjectionWebhook(mgr, webhook.InjectorConfig{Image: testImage, Resources: webhook.DefaultProxyResources()})
	})
	ctx := context.Background()
	const ns = "shop"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ct := &v1alpha1.ClusterRedisTarget{ObjectMeta: metav1.ObjectMeta{Name: "shop-redis"}, Spec: v1alpha1.ClusterRedisTargetSpec{
		Addresses: []string{"redis-0.platform.svc:6379", "redis-1.platform.svc:6379"}, Cluster: true,
		AllowedNamespaces: v1alpha1.AllowedNamespaces{Names: []string{ns}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cache"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "cache"}, Ports: []corev1.ServicePort{{Port: 7000}}}}
	policy := func(name string, target v1alpha1.RedisTarget) *v1alpha1.HotKeyPolicy {
		return &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.HotKeyPolicySpec{Mode: v1alpha1.ModeObserve, Target: target}}
	}
	for _, o := range []client.Object{ct, svc,
		policy("by-target", v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: "shop-redis"}}),
		policy("by-service", v1alpha1.RedisTarget{ServiceRef: &v1alpha1.ServiceTargetReference{Name: "cache", Port: 7000}}),
	} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	inject := func(name, policy string) (*corev1.Pod, error) {
		pod := testPod(ns, name, map[string]string{webhook.InjectAnnotation: policy})
		if err := cp.Client.Create(ctx, pod); err != nil {
			return nil, err
		}
		return pod, nil
	}
	for name, want := range map[string][2]string{
		"by-target":  {"redis-0.platform.svc:6379,redis-1.platform.svc:6379", "true"},
		"by-service": {"cache.shop.svc:7000", "false"},
	} {
		pod, err := inject("pod-"+name, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if up, cl := upstreamEnv(pod); up != want[0] || cl != want[1] {
			t.Errorf("%s: %s %q, %s %q; want %q, %q", name, injectlink.EnvUpstream, up, injectlink.EnvCluster, cl, want[0], want[1])
		}
	}
	// The platform team takes the target from shop.
	ct.Spec.AllowedNamespaces.Names = []string{"other"}
	if err := cp.Client.Update(ctx, ct); err != nil {
		t.Fatal(err)
	}
	_, err := inject("pod-revoked", "by-target")
	if err == nil || !strings.Contains(err.Error(), `does not allow namespace "shop"`) || !strings.Contains(err.Error(), "rule "+targets.RuleAllowedNamespaces) {
		t.Errorf("a pod of a policy whose target no longer allows its namespace: %v", err)
	}
}
