package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	hswebhook "github.com/heatsink-dev/heatsink/webhook"
)

// applyFile creates every object of a manifest file, in namespace ns when
// the object is namespaced and names none.
func applyFile(t *testing.T, c client.Client, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(context.Background(), u); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// serviceAccountConfig creates a ServiceAccount and returns a rest.Config
// that authenticates as it with a bound token.
func serviceAccountConfig(t *testing.T, cp *controlplane.ControlPlane, ns, name string) (*rest.Config, string) {
	t.Helper()
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, tr.Status.Token
}

// TestManagerMetricsAreAuthenticated runs the manager's metrics server as
// the chart does (HTTPS, authentication and authorization filter, HTTP/2
// off), under a ServiceAccount holding only the generated manager RBAC, and
// scrapes it: without a token (401), as a ServiceAccount without the
// metrics-reader role (403), and as one with it (200, heatsink metrics).
func TestManagerMetricsAreAuthenticated(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The manager's identity: the generated ClusterRole, bound as config/rbac binds it.
	if err := cp.CreateNamespace(ctx, "heatsink-system"); err != nil {
		t.Fatal(err)
	}
	applyFile(t, cp.Client, filepath.Join(cp.Root, "config", "rbac", "role.yaml"))
	applyFile(t, cp.Client, filepath.Join(cp.Root, "config", "rbac", "metrics_reader_role.yaml"))
	mgrCfg, _ := serviceAccountConfig(t, cp, "heatsink-system", "heatsink-manager")
	bind := func(name, role, ns, sa string) {
		t.Helper()
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}}}
		if err := cp.Client.Create(ctx, crb); err != nil {
			t.Fatal(err)
		}
	}
	bind("heatsink-manager", "heatsink-manager", "heatsink-system", "heatsink-manager")

	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	mf := bindManagerFlags(fs)
	port := freePort(t)
	if err := fs.Parse([]string{fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port)}); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{Scheme: cp.Scheme, Metrics: mf.metricsOptions(), HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	_, promToken := serviceAccountConfig(t, cp, "monitoring", "prometheus")
	bind("prometheus-heatsink-metrics", "heatsink-metrics-reader", "monitoring", "prometheus")
	_, nosyToken := serviceAccountConfig(t, cp, "monitoring", "nosy")

	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
	// The certificate is self-signed (no --metrics-cert-dir): scrapers skip
	// verification, as kubebuilder's ServiceMonitor does by default.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}},
		ForceAttemptHTTP2: true,
	}}
	scrape := func(token string) (int, string, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Proto, string(body)
	}
	if err := eventually.Poll(ctx, 30*time.Second, func() error {
		if code, _, body := scrape(""); code == 0 {
			return fmt.Errorf("metrics server not up: %s", body)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A token the API server does not know is refused too (controller-runtime's
	// filter answers 500 "Authentication failed" when the review errs).
	if code, _, _ := scrape("not-a-token"); code == http.StatusOK {
		t.Error("a made-up token got the metrics")
	}
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"no token":                {"", http.StatusUnauthorized},
		"not allowed to scrape":   {nosyToken, http.StatusForbidden},
		"bound to metrics-reader": {promToken, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			code, proto, body := scrape(tc.token)
			if code != tc.want {
				t.Fatalf("status %d, want %d: %.300s", code, tc.want, body)
			}
			if proto != "HTTP/1.1" {
				t.Errorf("served over %s; HTTP/2 must be off by default", proto)
			}
			if code == http.StatusOK && !bytes.Contains([]byte(body), []byte("controller_runtime_")) {
				t.Errorf("no metrics in the body: %.300s", body)
			}
		})
	}
}

// TestOwnImageIsTheSidecarDefault checks that with no --proxy-image the
// injector gets the image of the manager's own container, read from its Pod.
func TestOwnImageIsTheSidecarDefault(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, "platform-redis"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "platform-redis", Name: "heatsink-manager-7d9f"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "istio-proxy", Image: "istio/proxyv2:1"},
			{Name: managerContainer, Image: "registry.example.com/heatsink:v9"},
		}}}
	if err := cp.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got, err := hswebhook.OwnImage(ctx, cp.Client, "platform-redis", "heatsink-manager-7d9f", managerContainer)
	if err != nil || got != "registry.example.com/heatsink:v9" {
		t.Fatalf("OwnImage = %q, %v; want the manager container's image", got, err)
	}
	if _, err := hswebhook.OwnImage(ctx, cp.Client, "platform-redis", "", managerContainer); err == nil {
		t.Error("no POD_NAME: want an error naming POD_NAME and --proxy-image")
	}
	if _, err := hswebhook.OwnImage(ctx, cp.Client, "platform-redis", "heatsink-manager-7d9f", "other"); err == nil {
		t.Error("no such container: want an error")
	}
}
