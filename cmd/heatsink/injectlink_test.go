package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/webhook"
)

// TestInjectedPodIsWhatTheSidecarReads holds the injector ↔ sidecar
// contract (package injectlink) from both ends: for each kind of target,
// the container webhook.Inject writes, its environment resolved as the
// kubelet resolves it, read by the sidecar's own flag parsing
// (readSidecar, what `heatsink sidecar` runs), is the configuration the
// policy asks for; every file it names lies in a volume the container
// mounts, at a key that volume projects from the Secret or ConfigMap the
// policy names; and the probe's port is the port the sidecar serves on.
// A variable renamed, a path or key changed, or a flag default moved on
// one side only fails here.
func TestInjectedPodIsWhatTheSidecarReads(t *testing.T) {
	const ns, nodeIP = "shop", "10.0.0.7"
	limits := proxy.DefaultClientLimits()
	memory, err := sidecar.ParseMemory("")
	if err != nil {
		t.Fatal(err)
	}
	// base is what every injected sidecar runs with: the policy and its
	// namespace, the pod-local listen and HTTP addresses, the startup wait
	// its probe allows for, the default limits.
	base := func(policy string) sidecar.Config {
		return sidecar.Config{
			Listen: "127.0.0.1:6380", HTTPAddress: ":9091", Policy: policy, Namespace: ns,
			StartupWait: 10 * time.Second, Limits: limits, MaxMemory: memory,
		}
	}
	for _, tc := range []struct {
		name   string
		target v1alpha1.RedisTarget
		cfg    webhook.InjectorConfig
		want   func() sidecarSettings
	}{{
		name: "cluster, credentials, TLS with CA and client certificate, routing file, agent on the node",
		target: v1alpha1.RedisTarget{
			Addresses: []string{"redis-0.redis.shop.svc:6379", "redis-1.redis.shop.svc:6379"}, Cluster: true,
			CredentialsSecretRef: &corev1.LocalObjectReference{Name: "redis-auth"},
			TLS: &v1alpha1.RedisTLS{
				CASecretRef: &corev1.LocalObjectReference{Name: "redis-ca"}, ServerName: "redis.shop.svc",
				ClientCertSecretRef: &corev1.LocalObjectReference{Name: "redis-client"},
			},
		},
		cfg: webhook.InjectorConfig{Image: "heatsink:test", RoutingFile: true},
		want: func() sidecarSettings {
			c := base("catalogue")
			c.Upstreams, c.Cluster = []string{"redis-0.redis.shop.svc:6379", "redis-1.redis.shop.svc:6379"}, true
			c.UsernameFile, c.PasswordFile = "/etc/heatsink/credentials/username", "/etc/heatsink/credentials/password"
			c.RoutingFile = "/etc/heatsink/routing/routing.json"
			c.NodeAgent = nodeIP + ":7946"
			return sidecarSettings{Config: c, UseTLS: true, TLS: proxy.TLSOptions{
				CAFile: "/etc/heatsink/tls/ca.crt", ServerName: "redis.shop.svc",
				CertFile: "/etc/heatsink/tls-client/tls.crt", KeyFile: "/etc/heatsink/tls-client/tls.key",
			}}
		},
	}, {
		name: "Sentinel with its own credentials and Redis', agent Service, no routing file",
		target: v1alpha1.RedisTarget{
			Sentinel: &v1alpha1.RedisSentinel{
				Addresses: []string{"sentinel-0.shop.svc:26379", "sentinel-1.shop.svc:26379"}, MasterName: "mymaster",
				CredentialsSecretRef: &corev1.LocalObjectReference{Name: "sentinel-auth"},
			},
			CredentialsSecretRef: &corev1.LocalObjectReference{Name: "redis-auth"},
		},
		cfg: webhook.InjectorConfig{Image: "heatsink:test", NodeAgentAddress: "heatsink-node-agent.heatsink-system.svc:7946"},
		want: func() sidecarSettings {
			c := base("catalogue")
			c.Sentinels, c.SentinelMaster = []string{"sentinel-0.shop.svc:26379", "sentinel-1.shop.svc:26379"}, "mymaster"
			c.SentinelUsernameFile = "/etc/heatsink/sentinel-credentials/username"
			c.SentinelPasswordFile = "/etc/heatsink/sentinel-credentials/password"
			c.UsernameFile, c.PasswordFile = "/etc/heatsink/credentials/username", "/etc/heatsink/credentials/password"
			c.NodeAgent = "heatsink-node-agent.heatsink-system.svc:7946"
			return sidecarSettings{Config: c}
		},
	}, {
		name:   "standalone, no Secrets, TLS with the system roots",
		target: v1alpha1.RedisTarget{Addresses: []string{"redis.shop.svc:6379"}, TLS: &v1alpha1.RedisTLS{}},
		cfg:    webhook.InjectorConfig{Image: "heatsink:test"},
		want: func() sidecarSettings {
			c := base("catalogue")
			c.Upstreams = []string{"redis.shop.svc:6379"}
			c.NodeAgent = nodeIP + ":7946"
			return sidecarSettings{Config: c, UseTLS: true}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			policy := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "catalogue"}, Spec: v1alpha1.HotKeyPolicySpec{Target: tc.target}}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-0"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
			}
			webhook.Inject(pod, policy, tc.cfg)
			c := injectedContainer(t, pod)
			if len(c.Args) == 0 || c.Args[0] != injectlink.Subcommand || len(c.Command) != 0 {
				t.Fatalf("container runs %v %v, want the image's entrypoint with %q", c.Command, c.Args, injectlink.Subcommand)
			}
			env := kubeletEnv(t, pod, c, nodeIP)
			got, err := readSidecar(c.Args[1:], func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatalf("the sidecar refuses the injected environment %v: %v", env, err)
			}
			if d := cmp.Diff(tc.want(), got); d != "" {
				t.Errorf("the sidecar reads (-want +got):\n%s", d)
			}
			files := []string{got.Config.UsernameFile, got.Config.PasswordFile, got.Config.SentinelUsernameFile,
				got.Config.SentinelPasswordFile, got.Config.RoutingFile, got.TLS.CAFile, got.TLS.CertFile, got.TLS.KeyFile}
			for _, f := range files {
				if f != "" {
					checkMounted(t, pod, c, policy, f)
				}
			}
			_, port, _ := strings.Cut(got.Config.HTTPAddress, ":")
			probe := c.StartupProbe.HTTPGet
			if len(c.Ports) != 1 || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port || probe.Port.String() != c.Ports[0].Name {
				t.Errorf("container ports %+v, probe on %s; the sidecar serves HTTP on %s", c.Ports, probe.Port.String(), got.Config.HTTPAddress)
			}
		})
	}
}

func injectedContainer(t *testing.T, pod *corev1.Pod) corev1.Container {
	t.Helper()
	for _, c := range pod.Spec.InitContainers {
		if c.Name == webhook.ProxyContainerName {
			return c
		}
	}
	t.Fatalf("no %s container in %+v", webhook.ProxyContainerName, pod.Spec)
	return corev1.Container{}
}

// kubeletEnv resolves c's environment as the kubelet does: $(VAR) from the
// variables defined before, fieldRefs from the pod (the node at nodeIP).
// The injector uses no other source.
func kubeletEnv(t *testing.T, pod *corev1.Pod, c corev1.Container, nodeIP string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			v := e.Value
			for k, x := range env {
				v = strings.ReplaceAll(v, "$("+k+")", x)
			}
			if strings.Contains(v, "$(") {
				t.Fatalf("env %s=%q references a variable not defined before it", e.Name, e.Value)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = pod.Namespace
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP":
			env[e.Name] = nodeIP
		default:
			t.Fatalf("env %s: a source this test does not resolve: %+v", e.Name, e.ValueFrom)
		}
	}
	return env
}

// checkMounted checks that file lies in a volume c mounts, and that the
// volume projects the file's name from the Secret or ConfigMap the policy
// names for it.
func checkMounted(t *testing.T, pod *corev1.Pod, c corev1.Container, policy *v1alpha1.HotKeyPolicy, file string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/") + "/"
		key, ok := strings.CutPrefix(file, dir)
		if !ok {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.Secret != nil:
				if !secretNamed(policy, v.Secret.SecretName) {
					t.Errorf("%s: volume %s is Secret %q, which the policy does not name", file, v.Name, v.Secret.SecretName)
				}
				for _, it := range v.Secret.Items {
					if it.Path == key {
						return
					}
				}
				t.Errorf("%s: Secret volume %s projects %+v, not %q", file, v.Name, v.Secret.Items, key)
			case v.ConfigMap != nil:
				if v.ConfigMap.Name != routing.ConfigMapName(policy.Name) || key != routing.ConfigMapKey || len(v.ConfigMap.Items) != 0 {
					t.Errorf("%s: ConfigMap volume %+v, want %s's key %s", file, v.ConfigMap, routing.ConfigMapName(policy.Name), routing.ConfigMapKey)
				}
			default:
				t.Errorf("%s: volume %s holds neither a Secret nor a ConfigMap", file, v.Name)
			}
			return
		}
		t.Errorf("%s: the container mounts volume %s, which the pod does not have", file, m.Name)
		return
	}
	t.Errorf("%s: in no volume the container mounts (%+v)", file, c.VolumeMounts)
}

func secretNamed(policy *v1alpha1.HotKeyPolicy, name string) bool {
	tg := policy.Spec.Target
	refs := []*corev1.LocalObjectReference{tg.CredentialsSecretRef}
	if tg.Sentinel != nil {
		refs = append(refs, tg.Sentinel.CredentialsSecretRef)
	}
	if tg.TLS != nil {
		refs = append(refs, tg.TLS.CASecretRef, tg.TLS.ClientCertSecretRef)
	}
	for _, r := range refs {
		if r != nil && r.Name == name {
			return true
		}
	}
	return false
}
