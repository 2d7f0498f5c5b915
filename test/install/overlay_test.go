package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/heatsink-dev/heatsink/internal/release"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/docblock"
)

// The documented overlay (docs/install.md, "Your own overlay").
const overlayNamespace = "platform-redis"

// overlayImage is the overlay's image: its tag is the release's
// (release.yaml), as the doc's newTag is (test/repo checks that one).
func overlayImage(t *testing.T, root string) string {
	t.Helper()
	f, err := release.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	return "registry.example.com/platform/heatsink:" + f.ImageTag()
}

// documentedOverlay writes docs/install.md's kustomize-overlay block where
// it says it lives (overlays/platform, beside this repository's config/)
// and returns its directory.
func documentedOverlay(t *testing.T, root string) string {
	t.Helper()
	b := docblock.Get(t, docblock.Load(t, root, "docs/install.md"), "kustomize-overlay")
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "config"), filepath.Join(dir, "config")); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlays", "platform")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(b.Text), 0o600); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// knownStale lists references to the install namespace that the overlay
// cannot reach yet, each with why; the test fails on any other. None now.
var knownStale = map[string]string{}

// checkOverlayReferences checks that every reference follows the overlay's
// namespace and image: nothing names heatsink-system or the default image,
// binding subjects, webhook Services, cert-manager's DNS names and CA
// injection name the new namespace, and the manager derives the node agent
// address and the sidecar image at run time.
func checkOverlayReferences(t *testing.T, manifest []byte, objs []*unstructured.Unstructured) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	image := overlayImage(t, root)
	text := string(manifest)
	for ref := range knownStale {
		text = strings.ReplaceAll(text, ref, "")
	}
	for _, stale := range []string{"heatsink-system", "ghcr.io/heatsink-dev/heatsink", "namespace: system"} {
		if n := strings.Count(text, stale); n > 0 {
			t.Errorf("the overlay's build still holds %q %d times", stale, n)
		}
	}
	for _, o := range objs {
		what := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "Namespace":
			if o.GetName() != overlayNamespace {
				t.Errorf("Namespace %s, want %s", o.GetName(), overlayNamespace)
			}
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				sm := s.(map[string]any)
				if sm["kind"] == "ServiceAccount" && sm["namespace"] != overlayNamespace {
					t.Errorf("%s: subject %v in namespace %v", what, sm["name"], sm["namespace"])
				}
			}
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != overlayNamespace+"/heatsink-webhook" {
				t.Errorf("%s: inject-ca-from %q", what, got)
			}
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				ns, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "namespace")
				if ns != overlayNamespace {
					t.Errorf("%s: webhook Service in namespace %q", what, ns)
				}
			}
		case "Certificate":
			names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			want := []string{"heatsink-webhook-service." + overlayNamespace + ".svc", "heatsink-webhook-service." + overlayNamespace + ".svc.cluster.local"}
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("%s: dnsNames %v, want %v", what, names, want)
			}
		case "Deployment", "DaemonSet":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				cm := c.(map[string]any)
				if cm["image"] != image {
					t.Errorf("%s: container %v runs %v, want %s", what, cm["name"], cm["image"], image)
				}
				args, _, _ := unstructured.NestedStringSlice(cm, "args")
				for _, a := range args {
					if strings.HasPrefix(a, "--proxy-image=") {
						t.Errorf("%s: %s: the sidecar must default to the manager's own image", what, a)
					}
					if strings.HasPrefix(a, "--node-agent-address=") && !strings.Contains(a, "$(POD_NAMESPACE)") {
						t.Errorf("%s: %s does not follow the namespace", what, a)
					}
				}
				if o.GetKind() == "Deployment" {
					env := map[string]string{}
					list, _, _ := unstructured.NestedSlice(cm, "env")
					for _, e := range list {
						path, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")
						env[e.(map[string]any)["name"].(string)] = path
					}
					if env["POD_NAMESPACE"] != "metadata.namespace" || env["POD_NAME"] != "metadata.name" {
						t.Errorf("%s: POD_NAMESPACE and POD_NAME must come from the downward API: %v", what, env)
					}
				}
			}
		}
	}
}
