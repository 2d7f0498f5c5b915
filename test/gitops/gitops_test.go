// Package gitops tests that heatsink can be kept in Git: policies re-applied
// from Git do not drift or conflict with what the manager writes, the Argo CD
// health check of docs/gitops.md reads status as documented, its Flux layout
// is one Flux accepts, and the commands of docs/gitops.md run.
//
// Tests that need a kube-apiserver are skipped with -short.
package gitops

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/controllers/targets"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
	"github.com/heatsink-dev/heatsink/webhook"
)

// startHeatsink starts a control plane with the manager's reconciler and
// webhooks running against it, as the chart runs them.
func startHeatsink(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cp := testenv.Start(t, controlplane.Options{Webhooks: true})
	testenv.RunManager(t, cp, func(mgr manager.Manager) error {
		// The docs' policies write raw addresses: the installer's opt-in.
		if err := webhook.SetupHotKeyPolicyWebhook(mgr, targets.Options{AllowRawAddresses: true}); err != nil {
			return err
		}
		h, err := hub.New(hub.Options{Addr: "127.0.0.1:0", Token: "test"})
		if err != nil {
			return err
		}
		r := &controllers.HotKeyPolicyReconciler{SkipNameValidation: true, RedisTimeout: 2 * time.Second, Fleet: h, Targets: targets.Options{AllowRawAddresses: true}}
		return r.SetupWithManager(mgr)
	})
	return cp
}

func kubectl(t *testing.T, cp *controlplane.ControlPlane) (path, kubeconfig string) {
	t.Helper()
	assets, err := controlplane.AssetsDir(cp.Root)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(assets, "kubectl")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("kubectl not built: run make envtest (%v)", err)
	}
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return path, kubeconfig
}

// TestSamplesReapplyWithoutDrift applies every sample policy from Git with
// server-side apply under its own field manager, as Argo CD and Flux do, lets
// the manager reconcile them (finalizer, status), and applies them again:
// the second apply must succeed without forcing (no conflict), change no
// generation, and leave every spec field owned by the GitOps manager alone.
func TestSamplesReapplyWithoutDrift(t *testing.T) {
	cp := startHeatsink(t)
	ctx := context.Background()
	for _, ns := range []string{"shop", "social"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	kc, kubeconfig := kubectl(t, cp)
	apply := func() {
		t.Helper()
		out, err := exec.Command(kc, "--kubeconfig", kubeconfig, "apply", "--server-side", "--field-manager=gitops",
			"-k", filepath.Join(cp.Root, "config", "samples")).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply --server-side (no --force-conflicts): %v\n%s", err, out)
		}
	}
	apply()

	list := &v1alpha1.HotKeyPolicyList{}
	if err := cp.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	samples, err := filepath.Glob(filepath.Join(cp.Root, "config", "samples", "heatsink_v1alpha1_hotkeypolicy_*.yaml"))
	if err != nil || len(list.Items) != len(samples) || len(samples) == 0 {
		t.Fatalf("got %d policies from %d sample files (%v)", len(list.Items), len(samples), err)
	}
	// The manager has done what it does to a new policy: finalizer and status.
	for _, p := range list.Items {
		key := client.ObjectKeyFromObject(&p)
		err := eventually.Poll(ctx, time.Minute, func() error {
			got := &v1alpha1.HotKeyPolicy{}
			if err := cp.Client.Get(ctx, key, got); err != nil {
				return err
			}
			if len(got.Finalizers) == 0 || got.Status.ObservedGeneration != got.Generation {
				return errNotYet(key.String() + ": no finalizer or status yet")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	apply()

	if err := cp.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Generation != 1 {
			t.Errorf("%s/%s: generation %d after the manager's work and a second apply, want 1 (nobody changed spec)", p.Namespace, p.Name, p.Generation)
		}
		for _, mf := range p.ManagedFields {
			if mf.Manager == "gitops" || mf.FieldsV1 == nil {
				continue
			}
			if owned := specFields(t, mf); owned.Len() > 0 {
				t.Errorf("%s/%s: field manager %q (%s) owns spec fields %v; only Git may", p.Namespace, p.Name, mf.Manager, mf.Operation, sets.List(owned))
			}
		}
	}
}

type errNotYet string

func (e errNotYet) Error() string { return string(e) }

// specFields lists the top-level spec fields an entry of managedFields owns.
func specFields(t *testing.T, mf metav1.ManagedFieldsEntry) sets.Set[string] {
	t.Helper()
	var fields map[string]any
	if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
		t.Fatal(err)
	}
	out := sets.New[string]()
	spec, _ := fields["f:spec"].(map[string]any)
	for k := range spec {
		if k != "." {
			out.Insert(strings.TrimPrefix(k, "f:"))
		}
	}
	return out
}
