package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	hswebhook "github.com/heatsink-dev/heatsink/webhook"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestSelfSignedWebhookWiring runs the manager's webhook wiring as the chart
// configures it (self-signed certificates, sidecar injection) against a real
// API server: the manager creates its certificate Secret, patches the
// caBundle of its webhook configuration, and the API server then calls the
// injection webhook over TLS with that CA. The configuration is reached by
// URL (no Service in envtest), hence the extra name "localhost".
func TestSelfSignedWebhookWiring(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, cfgName = "heatsink-system", "heatsink-mutating-webhook-configuration"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	url := fmt.Sprintf("https://localhost:%d%s", port, hswebhook.InjectPath)
	fail, none, ifNeeded := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.IfNeededReinvocationPolicy
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "inject.heatsink.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &ifNeeded,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "asks-for-heatsink", Expression: "has(object.metadata.annotations) && 'heatsink.dev/inject' in object.metadata.annotations"}},
		}},
	}
	if err := cp.Client.Create(ctx, mwc); err != nil {
		t.Fatal(err)
	}

	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	wh := bindWebhookFlags(fs)
	if err := fs.Parse([]string{
		fmt.Sprintf("--webhook-port=%d", port),
		"--webhook-namespace=" + ns,
		"--webhook-cert-extra-names=localhost",
		"--validating-webhook-configuration=",
		"--proxy-image=ghcr.io/heatsink-dev/heatsink:test",
		// The policy below names its Redis by address, as an install that
		// enables raw addresses allows; the wiring is what is tested.
		"--allow-raw-target-addresses",
	}); err != nil {
		t.Fatal(err)
	}
	srv, err := prepareWebhookServer(ctx, cp.Config, wh, nil, (&managerFlags{}).tlsOptions())
	if err != nil {
		t.Fatal(err)
	}
	probePort := freePort(t)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:                 cp.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", probePort),
		WebhookServer:          srv,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := setupWebhooks(ctx, mgr, wh); err != nil {
		t.Fatal(err)
	}
	if err := addHealthChecks(mgr, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	sec := &corev1.Secret{}
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "heatsink-webhook-cert"}, sec); err != nil {
		t.Fatalf("the certificate Secret was not created before the server: %v", err)
	}
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: cfgName}, mwc); err != nil {
		t.Fatal(err)
	}
	if string(mwc.Webhooks[0].ClientConfig.CABundle) != string(sec.Data["ca-bundle.crt"]) {
		t.Fatal("caBundle not patched from the Secret")
	}

	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	policy := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue"},
		Spec: v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{Addresses: []string{"redis.shop.svc:6379"}}}}
	v1alpha1.SetDefaults(&policy.Spec) // no defaulting webhook registered here
	if err := cp.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	// The server starts with the manager: retry the pod until it is served.
	var pod *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pod = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app", Annotations: map[string]string{hswebhook.InjectAnnotation: "catalogue"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		}
		if err := cp.Client.Create(ctx, pod); err != nil {
			t.Logf("create pod: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the API server never got through to the webhook over TLS: %v", err)
	}
	// Readiness is the webhook server's: a replica is in the Service only
	// once it can answer admission requests.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", probePort))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "[+]webhook ok") {
		t.Errorf("readyz %d %q: want 200 with the webhook server's started check", resp.StatusCode, body)
	}
	// HTTP/2 is off on the webhook server.
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Errorf("the webhook server negotiated %q; HTTP/2 must be off by default", p)
	}
	conn.Close()

	got := &corev1.Pod{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Name != hswebhook.ProxyContainerName {
		t.Fatalf("pod not injected: %+v", got.Spec.InitContainers)
	}
}
