package webhook_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/injectlink"
	"github.com/heatsink-dev/heatsink/webhook"
)

// TestInjectSentinelTarget gives the sidecar the Sentinels, the master
// name and the Sentinels' credentials (their Secret mounted as files, as
// Redis' are, so that both rotate without a restart), and no upstream.
func TestInjectSentinelTarget(t *testing.T) {
	policy := testPolicy("shop", "catalogue")
	policy.Spec.Target = v1alpha1.RedisTarget{
		Sentinel: &v1alpha1.RedisSentinel{
			Addresses:            []string{"sentinel-0.shop.svc:26379", "sentinel-1.shop.svc:26379"},
			MasterName:           "mymaster",
			CredentialsSecretRef: &corev1.LocalObjectReference{Name: "sentinel-auth"},
		},
		CredentialsSecretRef: &corev1.LocalObjectReference{Name: "redis-auth"},
	}
	pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
	webhook.Inject(pod, policy, webhook.InjectorConfig{Image: testImage})
	env := envOf(pod.Spec.InitContainers[0])
	want := map[string]string{
		injectlink.EnvUpstream:             "",
		injectlink.EnvCluster:              "false",
		injectlink.EnvSentinelAddresses:    "sentinel-0.shop.svc:26379,sentinel-1.shop.svc:26379",
		injectlink.EnvSentinelMaster:       "mymaster",
		injectlink.EnvSentinelUsernameFile: "/etc/heatsink/sentinel-credentials/username",
		injectlink.EnvSentinelPasswordFile: "/etc/heatsink/sentinel-credentials/password",
		injectlink.EnvRedisUsernameFile:    "/etc/heatsink/credentials/username",
		injectlink.EnvRedisPasswordFile:    "/etc/heatsink/credentials/password",
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("%s = %q (set: %v), want %q", k, got, ok, v)
		}
	}
	// No credential in the environment: it would be fixed for the life
	// of the container.
	for _, k := range []string{injectlink.EnvSentinelUsername, injectlink.EnvSentinelPassword, injectlink.EnvRedisUsername, injectlink.EnvRedisPassword} {
		if v, ok := env[k]; ok {
			t.Errorf("%s = %q: credentials belong in the mounted files", k, v)
		}
	}
	proxy := pod.Spec.InitContainers[0]
	mounted := false
	for _, m := range proxy.VolumeMounts {
		if m.Name == webhook.SentinelCredentialsVolumeName {
			mounted = m.MountPath == "/etc/heatsink/sentinel-credentials/" && m.ReadOnly
		}
	}
	if !mounted {
		t.Errorf("the Sentinel credentials volume is not mounted read-only at /etc/heatsink/sentinel-credentials/: %v", proxy.VolumeMounts)
	}
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == webhook.SentinelCredentialsVolumeName {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "sentinel-auth" || vol.Secret.Optional == nil || !*vol.Secret.Optional || len(vol.Secret.Items) != 2 {
		t.Errorf("Sentinel credentials volume = %+v, want the optional Secret sentinel-auth (username, password)", vol)
	}
}

// TestValidateSentinelTarget refuses a Sentinel address that is not
// host:port and a Secret reference no Secret can have.
func TestValidateSentinelTarget(t *testing.T) {
	spec := &v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{Sentinel: &v1alpha1.RedisSentinel{
		Addresses: []string{"sentinel-0:26379", "no-port"}, MasterName: "mymaster",
		CredentialsSecretRef: &corev1.LocalObjectReference{Name: "Not_A_Name"},
	}}}
	errs, _ := webhook.ValidateSpec(spec, field.NewPath("spec"))
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = true
	}
	for _, f := range []string{"spec.target.sentinel.addresses[1]", "spec.target.sentinel.credentialsSecretRef.name"} {
		if !got[f] {
			t.Errorf("no error on %s; errors: %v", f, errs)
		}
	}
	if got["spec.target.sentinel.addresses[0]"] {
		t.Errorf("a good Sentinel address refused: %v", errs)
	}
}
