package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/internal/keynames"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/webhook"
)

const testImage = "ghcr.io/heatsink-dev/heatsink:test"

func testPolicy(ns, name string) *v1alpha1.HotKeyPolicy {
	return &v1alpha1.HotKeyPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.HotKeyPolicySpec{
			Target: v1alpha1.RedisTarget{
				Addresses:            []string{"redis-0.redis.shop.svc:6379", "redis-1.redis.shop.svc:6379"},
				Cluster:              true,
				CredentialsSecretRef: &corev1.LocalObjectReference{Name: "redis-auth"},
			},
		},
	}
}

func testPod(ns, name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			m[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			m[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.SecretKeyRef != nil:
			m[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return m
}

func TestInjectIsCompleteAndIdempotent(t *testing.T) {
	pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
	cfg := webhook.InjectorConfig{Image: testImage, Resources: webhook.DefaultProxyResources()}
	webhook.Inject(pod, testPolicy("shop", "catalogue"), cfg)
	once := pod.DeepCopy()
	webhook.Inject(pod, testPolicy("shop", "catalogue"), cfg)
	if d := cmp.Diff(once, pod); d != "" {
		t.Fatalf("second injection changed the pod (-once +twice):\n%s", d)
	}
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one sidecar and the app, got %d init containers, %d containers", len(pod.Spec.InitContainers), len(pod.Spec.Containers))
	}
	checkProxy(t, pod)
}

func TestInjectRoutingFileOnRequest(t *testing.T) {
	pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
	webhook.Inject(pod, testPolicy("shop", "catalogue"), webhook.InjectorConfig{Image: testImage, RoutingFile: true})
	proxy := pod.Spec.InitContainers[0]
	if got := envOf(proxy)[injectlink.EnvRoutingFile]; got != injectlink.RoutingFile {
		t.Errorf("%s = %q, want %q", injectlink.EnvRoutingFile, got, injectlink.RoutingFile)
	}
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == webhook.RoutingVolumeName {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != "catalogue-routing" || vol.ConfigMap.Optional == nil || !*vol.ConfigMap.Optional {
		t.Errorf("routing volume: %+v", vol)
	}
}

// TestInjectNoRoutingFileForHiddenKeyNames: the routing ConfigMap of a
// policy whose keys are hidden holds a view no proxy applies, so its pods
// get no routing file (they wait for their node agent), whether the policy
// or the installer hides them.
func TestInjectNoRoutingFileForHiddenKeyNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy v1alpha1.KeyNames
		least  keynames.Mode
	}{{"policy Hashed", v1alpha1.KeyNamesHashed, ""}, {"policy Truncated", v1alpha1.KeyNamesTruncated, ""}, {"installer Hashed", v1alpha1.KeyNamesPlain, keynames.Hashed}} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
			policy := testPolicy("shop", "catalogue")
			policy.Spec.KeyNames = tc.policy
			webhook.Inject(pod, policy, webhook.InjectorConfig{Image: testImage, RoutingFile: true, KeyNamesLeast: tc.least})
			if got := envOf(pod.Spec.InitContainers[0])[injectlink.EnvRoutingFile]; got != "" {
				t.Errorf("%s = %q, want none", injectlink.EnvRoutingFile, got)
			}
			for _, v := range pod.Spec.Volumes {
				if v.Name == webhook.RoutingVolumeName {
					t.Errorf("routing volume mounted: %+v", v)
				}
			}
		})
	}
}

// TestInjectStartupProbeCoversTheWait: the application starts once the
// proxy's /startupz passes, probed every second; the proxy passes it by
// itself at its startup wait at the latest, so the probe must not give up
// (and have the kubelet restart the proxy) before then, with room for the
// process's start.
func TestInjectStartupProbeCoversTheWait(t *testing.T) {
	pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
	webhook.Inject(pod, testPolicy("shop", "catalogue"), webhook.InjectorConfig{Image: testImage, RoutingFile: true})
	proxy := pod.Spec.InitContainers[0]
	wait, err := time.ParseDuration(envOf(proxy)[injectlink.EnvStartupWait])
	if err != nil || wait != injectlink.StartupWait {
		t.Fatalf("%s = %v (%v), want %s", injectlink.EnvStartupWait, wait, err, injectlink.StartupWait)
	}
	p := proxy.StartupProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != injectlink.StartupPath || p.HTTPGet.Port.String() != proxy.Ports[0].Name {
		t.Fatalf("startup probe %+v: want GET %s on %s", p, injectlink.StartupPath, proxy.Ports[0].Name)
	}
	period := time.Duration(p.PeriodSeconds) * time.Second
	if period != time.Second {
		t.Errorf("startup probe period %s: the application would start up to that long after the table", period)
	}
	if giveUp := period * time.Duration(p.FailureThreshold); giveUp < wait+10*time.Second {
		t.Errorf("startup probe gives up after %s (period %s × %d), within 10 s of the %s startup wait", giveUp, period, p.FailureThreshold, wait)
	}
}

func TestInjectNodeAgentService(t *testing.T) {
	pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
	cfg := webhook.InjectorConfig{Image: testImage, NodeAgentAddress: "heatsink-node-agent.heatsink-system.svc:7946"}
	webhook.Inject(pod, testPolicy("shop", "catalogue"), cfg)
	if got := envOf(pod.Spec.InitContainers[0])[injectlink.EnvNodeAgent]; got != cfg.NodeAgentAddress {
		t.Errorf("%s = %q, want %q", injectlink.EnvNodeAgent, got, cfg.NodeAgentAddress)
	}
}

// checkProxy asserts the injected sidecar of a pod for testPolicy.
func checkProxy(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	var proxy *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == webhook.ProxyContainerName {
			proxy = &pod.Spec.InitContainers[i]
		}
	}
	if proxy == nil {
		t.Fatalf("no %s container in %+v", webhook.ProxyContainerName, pod.Spec)
	}
	want := map[string]string{
		injectlink.EnvPolicy:            "catalogue",
		injectlink.EnvNamespace:         "field:metadata.namespace",
		injectlink.EnvNodeIP:            "field:status.hostIP",
		injectlink.EnvNodeAgent:         injectlink.Ref(injectlink.EnvNodeIP) + ":7946",
		injectlink.EnvUpstream:          "redis-0.redis.shop.svc:6379,redis-1.redis.shop.svc:6379",
		injectlink.EnvCluster:           "true",
		injectlink.EnvListen:            "127.0.0.1:6380",
		injectlink.EnvRoutingFile:       "",
		injectlink.EnvHTTPAddress:       ":9091",
		injectlink.EnvStartupWait:       "10s",
		injectlink.EnvRedisUsernameFile: "/etc/heatsink/credentials/username",
		injectlink.EnvRedisPasswordFile: "/etc/heatsink/credentials/password",
	}
	if d := cmp.Diff(want, envOf(*proxy)); d != "" {
		t.Errorf("proxy env (-want +got):\n%s", d)
	}
	if proxy.Image != testImage || strings.Join(proxy.Args, " ") != "sidecar" {
		t.Errorf("image %q args %q, want %q [proxy]", proxy.Image, proxy.Args, testImage)
	}
	if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("proxy is not a native sidecar: restartPolicy %v", proxy.RestartPolicy)
	}
	sc := proxy.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("proxy security context is not restricted: %+v", sc)
	}
	if sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
		t.Errorf("the injector forces a user or group on the pod (%v, %v): platforms that assign IDs refuse it", sc.RunAsUser, sc.RunAsGroup)
	}
	if proxy.Resources.Requests.Cpu().IsZero() || proxy.Resources.Limits.Memory().IsZero() {
		t.Errorf("proxy has no requests/limits: %+v", proxy.Resources)
	}
	// No API credential reaches the proxy: an empty directory covers the
	// token path, and no routing ConfigMap is mounted unless asked for.
	var noToken, creds *corev1.Volume
	for i := range pod.Spec.Volumes {
		switch pod.Spec.Volumes[i].Name {
		case webhook.NoTokenVolumeName:
			noToken = &pod.Spec.Volumes[i]
		case webhook.CredentialsVolumeName:
			creds = &pod.Spec.Volumes[i]
		case webhook.RoutingVolumeName:
			t.Errorf("routing ConfigMap mounted by default: %+v", pod.Spec.Volumes[i])
		}
	}
	if noToken == nil || noToken.EmptyDir == nil {
		t.Errorf("no empty volume over the token path: %+v", pod.Spec.Volumes)
	}
	// The credentials Secret comes as files the proxy re-reads (rotation
	// without a restart), optional as its keys may be.
	if creds == nil || creds.Secret == nil || creds.Secret.SecretName != "redis-auth" || creds.Secret.Optional == nil || !*creds.Secret.Optional ||
		len(creds.Secret.Items) != 2 || creds.Secret.Items[0].Key != "username" || creds.Secret.Items[1].Key != "password" {
		t.Errorf("credentials volume = %+v, want Secret redis-auth, keys username and password, optional", creds)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: webhook.NoTokenVolumeName, MountPath: webhook.ServiceAccountTokenPath, ReadOnly: true},
		{Name: webhook.CredentialsVolumeName, MountPath: "/etc/heatsink/credentials/", ReadOnly: true},
	}
	if d := cmp.Diff(wantMounts, proxy.VolumeMounts); d != "" {
		t.Errorf("proxy mounts (-want +got):\n%s", d)
	}
	if pod.Labels[v1alpha1.LabelPolicy] != "catalogue" {
		t.Errorf("label %s = %q, want catalogue", v1alpha1.LabelPolicy, pod.Labels[v1alpha1.LabelPolicy])
	}
	if pod.Annotations[webhook.InjectedAnnotation] != "catalogue" {
		t.Errorf("annotation %s = %q", webhook.InjectedAnnotation, pod.Annotations[webhook.InjectedAnnotation])
	}
}

func TestInjectionWebhook(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{Webhooks: true})
	testenv.RunManager(t, cp, func(mgr manager.Manager) error {
		if err := webhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{AllowRawAddresses: true}); err != nil {
			return err
		}
		return webhook.SetupInjectionWebhook(mgr, webhook.InjectorConfig{Image: testImage, Resources: webhook.DefaultProxyResources(), Targets: targets.Options{AllowRawAddresses: true}})
	})
	ctx := context.Background()
	const ns = "shop"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, testPolicy(ns, "catalogue")); err != nil {
		t.Fatal(err)
	}
	create := func(pod *corev1.Pod) (*corev1.Pod, error) {
		if err := cp.Client.Create(ctx, pod); err != nil {
			return nil, err
		}
		got := &corev1.Pod{}
		return got, cp.Client.Get(ctx, client.ObjectKeyFromObject(pod), got)
	}

	t.Run("annotated pod gets the proxy", func(t *testing.T) {
		got, err := create(testPod(ns, "annotated", map[string]string{webhook.InjectAnnotation: "catalogue"}))
		if err != nil {
			t.Fatal(err)
		}
		checkProxy(t, got)
		if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Name != "app" {
			t.Errorf("app containers changed: %+v", got.Spec.Containers)
		}
	})
	t.Run("pod without the annotation is untouched", func(t *testing.T) {
		got, err := create(testPod(ns, "plain", map[string]string{"other": "x"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.InitContainers) != 0 || len(got.Spec.Volumes) != 0 || got.Annotations[webhook.InjectedAnnotation] != "" {
			t.Errorf("unannotated pod was changed: %+v", got.Spec)
		}
	})
	t.Run("already injected pod is unchanged (re-invocation)", func(t *testing.T) {
		pod := testPod(ns, "reinvoked", map[string]string{webhook.InjectAnnotation: "catalogue"})
		webhook.Inject(pod, testPolicy(ns, "catalogue"), webhook.InjectorConfig{Image: testImage, Resources: webhook.DefaultProxyResources()})
		got, err := create(pod.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.InitContainers) != 1 || len(got.Spec.Volumes) != 2 {
			t.Fatalf("second pass duplicated the sidecar: %d init containers, %d volumes", len(got.Spec.InitContainers), len(got.Spec.Volumes))
		}
		checkProxy(t, got)
	})
	t.Run("TLS policy mounts the CA and the client certificate and sets the TLS environment", func(t *testing.T) {
		pol := testPolicy(ns, "secure")
		pol.Spec.Target.TLS = &v1alpha1.RedisTLS{
			CASecretRef:         &corev1.LocalObjectReference{Name: "redis-ca"},
			ServerName:          "redis.shop.svc",
			ClientCertSecretRef: &corev1.LocalObjectReference{Name: "redis-client"},
		}
		if err := cp.Client.Create(ctx, pol); err != nil {
			t.Fatal(err)
		}
		got, err := create(testPod(ns, "secure", map[string]string{webhook.InjectAnnotation: "secure"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.InitContainers) != 1 {
			t.Fatalf("want the sidecar, got %d init containers", len(got.Spec.InitContainers))
		}
		c := got.Spec.InitContainers[0]
		env := envOf(c)
		for k, want := range map[string]string{
			injectlink.EnvTLS:           "true",
			injectlink.EnvTLSServerName: "redis.shop.svc",
			injectlink.EnvTLSCAFile:     "/etc/heatsink/tls/ca.crt",
			injectlink.EnvTLSCertFile:   "/etc/heatsink/tls-client/tls.crt",
			injectlink.EnvTLSKeyFile:    "/etc/heatsink/tls-client/tls.key",
		} {
			if env[k] != want {
				t.Errorf("%s = %q, want %q", k, env[k], want)
			}
		}
		var mounted bool
		for _, m := range c.VolumeMounts {
			if m.Name == webhook.TLSVolumeName {
				mounted = m.MountPath == "/etc/heatsink/tls/" && m.ReadOnly
			}
		}
		if !mounted {
			t.Errorf("CA volume not mounted read-only at /etc/heatsink/tls/: %+v", c.VolumeMounts)
		}
		var vol *corev1.Volume
		for i := range got.Spec.Volumes {
			if got.Spec.Volumes[i].Name == webhook.TLSVolumeName {
				vol = &got.Spec.Volumes[i]
			}
		}
		if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "redis-ca" ||
			vol.Secret.Optional == nil || *vol.Secret.Optional ||
			len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != "ca.crt" {
			t.Fatalf("CA volume = %+v, want Secret redis-ca, key ca.crt, not optional", vol)
		}
		var client *corev1.Volume
		for i := range got.Spec.Volumes {
			if got.Spec.Volumes[i].Name == webhook.ClientCertVolumeName {
				client = &got.Spec.Volumes[i]
			}
		}
		if client == nil || client.Secret == nil || client.Secret.SecretName != "redis-client" ||
			client.Secret.Optional == nil || *client.Secret.Optional || len(client.Secret.Items) != 2 ||
			client.Secret.Items[0].Key != "tls.crt" || client.Secret.Items[1].Key != "tls.key" {
			t.Fatalf("client certificate volume = %+v, want Secret redis-client, keys tls.crt and tls.key, not optional", client)
		}
		mounted = false
		for _, m := range c.VolumeMounts {
			if m.Name == webhook.ClientCertVolumeName {
				mounted = m.MountPath == "/etc/heatsink/tls-client/" && m.ReadOnly
			}
		}
		if !mounted {
			t.Errorf("client certificate not mounted read-only at /etc/heatsink/tls-client/: %+v", c.VolumeMounts)
		}
	})
	t.Run("TLS without a CA or server name sets only the TLS switch", func(t *testing.T) {
		pol := testPolicy(ns, "systemroots")
		pol.Spec.Target.TLS = &v1alpha1.RedisTLS{}
		if err := cp.Client.Create(ctx, pol); err != nil {
			t.Fatal(err)
		}
		got, err := create(testPod(ns, "systemroots", map[string]string{webhook.InjectAnnotation: "systemroots"}))
		if err != nil {
			t.Fatal(err)
		}
		env := envOf(got.Spec.InitContainers[0])
		_, sn := env[injectlink.EnvTLSServerName]
		_, ca := env[injectlink.EnvTLSCAFile]
		if env[injectlink.EnvTLS] != "true" || sn || ca {
			t.Errorf("env = %v, want %s=true and no server name or CA file", env, injectlink.EnvTLS)
		}
		for _, v := range got.Spec.Volumes {
			if v.Name == webhook.TLSVolumeName {
				t.Errorf("CA volume without a caSecretRef: %+v", v)
			}
		}
	})
	t.Run("pod naming a missing policy is refused with the cause", func(t *testing.T) {
		_, err := create(testPod(ns, "orphan", map[string]string{webhook.InjectAnnotation: "nope"}))
		if err == nil || !strings.Contains(err.Error(), `no HotKeyPolicy "nope" in namespace "shop"`) {
			t.Fatalf("want a refusal naming the missing policy, got %v", err)
		}
	})
	t.Run("a host-network pod is refused with the cause", func(t *testing.T) {
		pod := testPod(ns, "hostnet", map[string]string{webhook.InjectAnnotation: "catalogue"})
		pod.Spec.HostNetwork = true
		_, err := create(pod)
		if err == nil || !strings.Contains(err.Error(), "hostNetwork: true") {
			t.Fatalf("want a refusal naming hostNetwork, got %v", err)
		}
	})
	t.Run("bad policy name is refused", func(t *testing.T) {
		_, err := create(testPod(ns, "bad", map[string]string{webhook.InjectAnnotation: "Not_A_Name"}))
		if err == nil || !strings.Contains(err.Error(), "is not a HotKeyPolicy name") {
			t.Fatalf("want a refusal of the bad name, got %v", err)
		}
	})
}
