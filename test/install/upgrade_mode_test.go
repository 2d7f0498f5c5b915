package install

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// TestUpgradeKeepsStoredMode states exactly what the change of spec.mode's
// default (Enforce before, Observe now) does to the policies of an
// upgraded cluster, with a real API server: a policy written under the old
// CRD without a mode was stored with mode Enforce (the schema's default is
// applied when an object is written, and persisted), and keeps it after the
// CRD is upgraded, through a merge patch (kubectl apply's client-side
// apply) and a server-side apply of the same manifest; only a full
// replacement (PUT: kubectl replace, an update that sends the object
// without spec.mode) takes the new default, Observe. A policy created after
// the upgrade without a mode is Observe.
func TestUpgradeKeepsStoredMode(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	// The CRD this repository ships (config/crd/bases, as the chart's)
	// defaults to Observe.
	probe := modelessPolicy("probe")
	if err := cp.Client.Create(ctx, probe, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := unstructured.NestedString(probe.Object, "spec", "mode"); m != "Observe" {
		t.Errorf("the shipped CRD gives a policy without mode the mode %q, want Observe", m)
	}
	setModeDefault(t, cp, "Enforce") // the CRD of the previous release
	for _, name := range []string{"patched", "applied", "replaced"} {
		if err := cp.Client.Create(ctx, modelessPolicy(name)); err != nil {
			t.Fatal(err)
		}
	}
	setModeDefault(t, cp, "Observe") // the upgrade: kubectl apply --server-side -f charts/heatsink/crds/

	for _, name := range []string{"patched", "applied", "replaced"} {
		if got := storedMode(t, cp, name); got != "Enforce" {
			t.Errorf("%s: mode %q after the CRD upgrade, want the stored Enforce", name, got)
		}
	}
	// kubectl apply (client-side): a merge patch of what changed; the
	// manifest has no mode, so the patch has none.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"keys":{"include":["product:*"]}}}`))
	if err := cp.Client.Patch(ctx, modelessPolicy("patched"), patch); err != nil {
		t.Fatal(err)
	}
	// kubectl apply --server-side of the manifest without mode.
	applied := modelessPolicy("applied")
	applied.Object["spec"].(map[string]any)["keys"] = map[string]any{"include": []any{"product:*"}}
	if err := cp.Client.Patch(ctx, applied, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	// kubectl replace: the whole object, without spec.mode.
	replaced := &unstructured.Unstructured{}
	replaced.SetGroupVersionKind(policyGVK)
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "replaced"}, replaced); err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(replaced.Object, "spec", "mode")
	if err := cp.Client.Update(ctx, replaced); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Create(ctx, modelessPolicy("created")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"patched": "Enforce", "applied": "Enforce", "replaced": "Observe", "created": "Observe"} {
		if got := storedMode(t, cp, name); got != want {
			t.Errorf("%s: mode %q after the upgrade, want %s", name, got, want)
		}
	}
}

var policyGVK = schema.GroupVersionKind{Group: "heatsink.dev", Version: "v1alpha1", Kind: "HotKeyPolicy"}

// modelessPolicy is shop/name as a manifest without spec.mode.
func modelessPolicy(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"target": map[string]any{"addresses": []any{"redis.shop.svc:6379"}}},
	}}
	u.SetGroupVersionKind(policyGVK)
	u.SetNamespace("shop")
	u.SetName(name)
	return u
}

func storedMode(t *testing.T, cp *controlplane.ControlPlane, name string) string {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(policyGVK)
	if err := cp.Client.Get(context.Background(), types.NamespacedName{Namespace: "shop", Name: name}, u); err != nil {
		t.Fatal(err)
	}
	m, _, _ := unstructured.NestedString(u.Object, "spec", "mode")
	return m
}

// setModeDefault changes the CRD's default for spec.mode and waits until
// the API server applies it (a dry-run create shows it).
func setModeDefault(t *testing.T, cp *controlplane.ControlPlane, mode string) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("hotkeypolicies.heatsink.dev")
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/mode/default","value":%q}]`, mode)
	if err := cp.Client.Patch(ctx, crd, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	err := eventually.Poll(ctx, 30*time.Second, func() error {
		probe := modelessPolicy("probe")
		if err := cp.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return err
		}
		if m, _, _ := unstructured.NestedString(probe.Object, "spec", "mode"); m != mode {
			return fmt.Errorf("a new policy gets mode %q, want %s", m, mode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
