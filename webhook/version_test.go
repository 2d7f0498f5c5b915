package webhook_test

import (
	"testing"

	"github.com/heatsink-dev/heatsink/webhook"
)

// TestInjectLabelsTheSidecarVersion checks that an injected pod says which
// sidecar version it runs (its image's tag), without touching the
// application's own app.kubernetes.io/version.
func TestInjectLabelsTheSidecarVersion(t *testing.T) {
	pod := testPod("shop", "app", map[string]string{webhook.InjectAnnotation: "catalogue"})
	pod.Labels = map[string]string{"app.kubernetes.io/version": "7.1"}
	webhook.Inject(pod, testPolicy("shop", "catalogue"), webhook.InjectorConfig{Image: "registry.example/heatsink:0.2.0"})
	if got := pod.Labels[webhook.SidecarVersionLabel]; got != "0.2.0" {
		t.Errorf("%s = %q, want 0.2.0", webhook.SidecarVersionLabel, got)
	}
	if pod.Labels["app.kubernetes.io/version"] != "7.1" {
		t.Errorf("the application's version label became %q", pod.Labels["app.kubernetes.io/version"])
	}
	for image, want := range map[string]string{
		"ghcr.io/heatsink-dev/heatsink:0.1.0":                 "0.1.0",
		"localhost:5000/heatsink:v0.2.0-rc.1":                 "v0.2.0-rc.1",
		"localhost:5000/heatsink":                             "",
		"ghcr.io/heatsink-dev/heatsink@sha256:" + sixtyFour(): "",
		"ghcr.io/heatsink-dev/heatsink:0.1.0+build":           "",
	} {
		if got := webhook.ImageVersion(image); got != want {
			t.Errorf("ImageVersion(%q) = %q, want %q", image, got, want)
		}
	}
}

func sixtyFour() string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}
