// Package controlplane runs a real kube-apiserver and etcd (controller-runtime's
// envtest) with heatsink's CRDs and, optionally, its webhooks installed. Tests
// use it through internal/testenv; the demo uses it directly.
//
// The binaries come from bin/k8s/<version>/, built by hack/setup-envtest.sh;
// KUBEBUILDER_ASSETS overrides the directory.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/heatsink-dev/heatsink/internal/scheme"
)

// DefaultK8sVersion is the version hack/setup-envtest.sh builds by default.
const DefaultK8sVersion = "1.37.2"

// Options configures a control plane.
type Options struct {
	// Webhooks installs the webhook configurations of config/webhook, pointing
	// at a local server that NewManager configures.
	Webhooks bool
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	Root   string
}

// RepoRoot finds the repository root (the directory holding go.mod) from the
// working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "config", "crd", "bases")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod with config/crd/bases) not found above the working directory")
		}
		dir = parent
	}
}

// AssetsDir is where the control-plane binaries are.
func AssetsDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		v := os.Getenv("K8S_VERSION")
		if v == "" {
			v = DefaultK8sVersion
		}
		dir = filepath.Join(root, "bin", "k8s", v)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make envtest` (builds it from the Go module proxy)", b, dir)
		}
	}
	return dir, nil
}

// Start starts etcd and kube-apiserver and installs the CRDs (and webhook
// configurations when asked).
func Start(opts Options) (*ControlPlane, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir(root)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	if opts.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook")},
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after launching etcd and kube-apiserver (say, on
		// an invalid CRD): stop whatever it started.
		_ = env.Stop()
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	s := scheme.New()
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{Env: env, Config: cfg, Client: c, Scheme: s, Root: root}, nil
}

// Stop stops kube-apiserver and etcd.
func (cp *ControlPlane) Stop() error { return cp.Env.Stop() }

// ManagerOptions are manager options for this control plane: metrics and
// health off (tests run many managers), and the webhook server bound to
// the address the installed webhook configurations call.
func (cp *ControlPlane) ManagerOptions() manager.Options {
	wio := &cp.Env.WebhookInstallOptions
	return manager.Options{
		Scheme:                 cp.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    wio.LocalServingHost,
			Port:    wio.LocalServingPort,
			CertDir: wio.LocalServingCertDir,
		}),
	}
}

// CreateNamespace creates a namespace (and ignores that it exists).
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{}
	ns.Name = name
	err := cp.Client.Create(ctx, ns)
	if err != nil && client.IgnoreAlreadyExists(err) == nil {
		return nil
	}
	return err
}

// Kubeconfig writes a kubeconfig for the control plane's admin user to path.
func (cp *ControlPlane) Kubeconfig(path string) error {
	u, err := cp.Env.ControlPlane.AddUser(envtest.User{Name: "heatsink-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := u.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
