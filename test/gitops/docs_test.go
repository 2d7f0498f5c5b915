package gitops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/docblock"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func gitopsDoc(t *testing.T) map[string]docblock.Block {
	t.Helper()
	return docblock.Load(t, repoRoot(t), "docs/gitops.md")
}

// decodeAll splits a YAML block into objects.
func decodeAll(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// luaValue converts decoded JSON as Argo CD does (util/lua decodeValue):
// objects to tables, arrays to 1-based tables, numbers to Lua numbers.
func luaValue(l *lua.LState, v any) lua.LValue {
	switch c := v.(type) {
	case bool:
		return lua.LBool(c)
	case float64:
		return lua.LNumber(c)
	case int64:
		return lua.LNumber(c)
	case string:
		return lua.LString(c)
	case []any:
		t := l.CreateTable(len(c), 0)
		for _, e := range c {
			t.Append(luaValue(l, e))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(c))
		for k, e := range c {
			t.RawSetH(lua.LString(k), luaValue(l, e))
		}
		return t
	}
	return lua.LNil
}

// argoHealth runs a health script as Argo CD does: only the package, base
// and table libraries open (no string library), obj the resource, and a
// table with status and message returned.
func argoHealth(t *testing.T, script string, obj map[string]any) (status, message string) {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.fn), Protect: true}, lua.LString(lib.name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luaValue(l, obj))
	if err := l.DoString(script); err != nil {
		t.Fatalf("the health script fails: %v", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the health script returns %s, want a table", l.Get(-1).Type())
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message"))
}

// TestArgoCDHealthCheck runs docs/gitops.md's health check with a Lua
// interpreter for Go (gopher-lua, the one Argo CD embeds) on status
// fixtures of every state a policy can be in.
func TestArgoCDHealthCheck(t *testing.T) {
	cm := decodeAll(t, docblock.Get(t, gitopsDoc(t), "argocd-health").Text)
	if len(cm) != 1 || cm[0].GetKind() != "ConfigMap" || cm[0].GetName() != "argocd-cm" {
		t.Fatalf("the argocd-health block is not the argocd-cm ConfigMap: %v", cm)
	}
	data, _, _ := unstructured.NestedStringMap(cm[0].Object, "data")
	script, ok := data["resource.customizations.health.heatsink.dev_HotKeyPolicy"]
	if !ok {
		t.Fatalf("argocd-cm has no health key for heatsink.dev/HotKeyPolicy: %v", data)
	}
	cond := func(typ, status, reason, msg string) string {
		return fmt.Sprintf("{type: %s, status: %q, reason: %s, message: %q, lastTransitionTime: '2026-11-30T10:00:00Z'}", typ, status, reason, msg)
	}
	healthy := []string{cond("Ready", "True", "Published", "routing table version 3 published"), cond("Mitigating", "False", "NoHotKeys", "no key is mitigated"), cond("Degraded", "False", "Healthy", "nothing is degraded")}
	tests := map[string]struct {
		meta, status string // YAML flow mappings
		want, msg    string
	}{
		"new, no status yet": {meta: "{generation: 1}", want: "Progressing", msg: "observe generation 1"},
		"spec changed, not yet observed": {meta: "{generation: 2}",
			status: "{observedGeneration: 1, conditions: [" + strings.Join(healthy, ",") + "]}", want: "Progressing", msg: "generation 2"},
		"published, nothing degraded": {meta: "{generation: 2}",
			status: "{observedGeneration: 2, conditions: [" + strings.Join(healthy, ",") + "]}", want: "Healthy", msg: "published"},
		"published but Redis down": {meta: "{generation: 1}",
			status: "{observedGeneration: 1, conditions: [" + cond("Ready", "True", "Published", "routing table version 3 published") + "," + cond("Degraded", "True", "RedisUnavailable", "dial tcp: no such host") + "]}",
			want:   "Degraded", msg: "RedisUnavailable"},
		"credentials missing": {meta: "{generation: 1}",
			status: "{observedGeneration: 1, conditions: [" + cond("Ready", "True", "Published", "v1") + "," + cond("Degraded", "True", "CredentialsMissing", "Secret redis-auth not found") + "]}",
			want:   "Degraded", msg: "redis-auth"},
		"routing table cannot be published": {meta: "{generation: 1}",
			status: "{observedGeneration: 1, conditions: [" + cond("Ready", "False", "PublishFailed", "configmaps is forbidden") + "," + cond("Degraded", "False", "Healthy", "nothing is degraded") + "]}",
			want:   "Degraded", msg: "PublishFailed"},
		"observe mode": {meta: "{generation: 1}",
			status: "{observedGeneration: 1, conditions: [" + cond("Ready", "True", "Observing", "decisions are computed") + "," + cond("Degraded", "False", "Healthy", "nothing is degraded") + "]}",
			want:   "Healthy", msg: "Observing"},
		"deleted, draining split keys": {meta: "{generation: 1, deletionTimestamp: '2026-11-30T10:05:00Z', finalizers: [heatsink.dev/routing]}",
			status: "{observedGeneration: 1, conditions: [" + cond("Ready", "True", "Draining", "policy deleted: 3 split keys are unsplit and folded") + "," + cond("Degraded", "False", "Healthy", "nothing is degraded") + "]}",
			want:   "Progressing", msg: "3 split keys"},
		"deleted, drain blocked": {meta: "{generation: 1, deletionTimestamp: '2026-11-30T10:05:00Z', finalizers: [heatsink.dev/routing]}",
			status: "{observedGeneration: 1, conditions: [" + cond("Ready", "True", "Draining", "policy deleted") + "," + cond("Degraded", "True", "RedisUnavailable", "deletion blocked: 3 split keys cannot be folded") + "]}",
			want:   "Degraded", msg: "cannot be folded"},
		"deleted before the manager saw it": {meta: "{generation: 1, deletionTimestamp: '2026-11-30T10:05:00Z'}", want: "Progressing", msg: "deleting"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := "apiVersion: heatsink.dev/v1alpha1\nkind: HotKeyPolicy\nmetadata: " + tc.meta
			if tc.status != "" {
				doc += "\nstatus: " + tc.status
			}
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatal(err)
			}
			// Argo CD hands the script the object as the API server serves it.
			b, _ := json.Marshal(obj)
			obj = nil
			if err := json.Unmarshal(b, &obj); err != nil {
				t.Fatal(err)
			}
			status, msg := argoHealth(t, script, obj)
			if status != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("health %q %q, want %q with %q", status, msg, tc.want, tc.msg)
			}
		})
	}
}

// TestArgoCDApplications checks the documented Applications: the chart's
// path exists, server-side apply is on, and the one field the manager
// writes (caBundle) is ignored, also by self-heal.
func TestArgoCDApplications(t *testing.T) {
	docs := gitopsDoc(t)
	op := decodeAll(t, docblock.Get(t, docs, "argocd-operator").Text)
	pol := decodeAll(t, docblock.Get(t, docs, "argocd-policies").Text)
	if len(op) != 1 || len(pol) != 1 {
		t.Fatalf("want one Application per block, got %d and %d", len(op), len(pol))
	}
	path, _, _ := unstructured.NestedString(op[0].Object, "spec", "source", "path")
	if _, err := os.Stat(filepath.Join(repoRoot(t), path, "Chart.yaml")); err != nil {
		t.Errorf("the operator's source path %q is not this repository's chart: %v", path, err)
	}
	for _, app := range append(op, pol...) {
		opts, _, _ := unstructured.NestedStringSlice(app.Object, "spec", "syncPolicy", "syncOptions")
		if !contains(opts, "ServerSideApply=true") {
			t.Errorf("%s: no ServerSideApply=true in %v", app.GetName(), opts)
		}
	}
	opts, _, _ := unstructured.NestedStringSlice(op[0].Object, "spec", "syncPolicy", "syncOptions")
	if !contains(opts, "RespectIgnoreDifferences=true") {
		t.Error("the operator's self-heal would reset caBundle: no RespectIgnoreDifferences=true")
	}
	ignored := map[string]bool{}
	diffs, _, _ := unstructured.NestedSlice(op[0].Object, "spec", "ignoreDifferences")
	for _, d := range diffs {
		dm := d.(map[string]any)
		paths, _, _ := unstructured.NestedStringSlice(dm, "jqPathExpressions")
		if contains(paths, ".webhooks[]?.clientConfig.caBundle") {
			ignored[fmt.Sprint(dm["kind"])] = true
		}
	}
	for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		if !ignored[k] {
			t.Errorf("caBundle of %s is not ignored", k)
		}
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// TestFluxLayout checks docs/gitops.md's Flux objects as Flux would: the
// API server validates them against Flux's CRDs (testdata/flux-crds), and
// the rules the schemas cannot say hold: a Kustomization depends on
// Kustomizations, the one the policies wait for waits for the HelmRelease,
// every source exists, the chart path is this repository's chart, and the
// drift detection ignores the caBundle of every webhook the chart renders.
func TestFluxLayout(t *testing.T) {
	root := repoRoot(t)
	docs := gitopsDoc(t)
	opBlock := docblock.Get(t, docs, "flux-operator")
	ksBlock := docblock.Get(t, docs, "flux-kustomizations")
	objs := append(decodeAll(t, opBlock.Text), decodeAll(t, ksBlock.Text)...)
	byKind := map[string]map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if byKind[o.GetKind()] == nil {
			byKind[o.GetKind()] = map[string]*unstructured.Unstructured{}
		}
		byKind[o.GetKind()][o.GetNamespace()+"/"+o.GetName()] = o
	}
	// flux bootstrap creates the GitRepository flux-system/flux-system.
	sources := map[string]bool{"GitRepository/flux-system/flux-system": true}
	for key := range byKind["GitRepository"] {
		sources["GitRepository/"+key] = true
	}
	ref := func(o *unstructured.Unstructured, path ...string) string {
		m, _, _ := unstructured.NestedStringMap(o.Object, path...)
		ns := m["namespace"]
		if ns == "" {
			ns = o.GetNamespace()
		}
		return m["kind"] + "/" + ns + "/" + m["name"]
	}

	waiting := map[string]bool{}
	for key, k := range byKind["Kustomization"] {
		if s := ref(k, "spec", "sourceRef"); !sources[s] {
			t.Errorf("Kustomization %s: source %s is not in the layout", key, s)
		}
		deps, _, _ := unstructured.NestedSlice(k.Object, "spec", "dependsOn")
		for _, d := range deps {
			dm := d.(map[string]any)
			ns, _ := dm["namespace"].(string)
			if ns == "" {
				ns = k.GetNamespace()
			}
			dep := byKind["Kustomization"][ns+"/"+fmt.Sprint(dm["name"])]
			if dep == nil {
				t.Errorf("Kustomization %s depends on %s/%v, which is no Kustomization of the layout: Flux's dependsOn names objects of the same kind", key, ns, dm["name"])
				continue
			}
			if wait, _, _ := unstructured.NestedBool(dep.Object, "spec", "wait"); !wait {
				t.Errorf("Kustomization %s depends on %s, which does not wait for what it applies (the HelmRelease)", key, dep.GetName())
			}
			waiting[dep.GetNamespace()+"/"+dep.GetName()] = true
		}
	}
	if len(waiting) == 0 {
		t.Error("no Kustomization waits for the operator")
	}
	// The operator's Kustomization applies the file the block says it is.
	first := strings.SplitN(opBlock.Text, "\n", 2)[0]
	for key := range waiting {
		path, _, _ := unstructured.NestedString(byKind["Kustomization"][key].Object, "spec", "path")
		if !strings.Contains(first, strings.TrimPrefix(path, "./")+"/") {
			t.Errorf("Kustomization %s applies %s, but the operator's objects are in %q", key, path, first)
		}
	}

	hrs := byKind["HelmRelease"]
	if len(hrs) != 1 {
		t.Fatalf("want one HelmRelease, got %d", len(hrs))
	}
	for key, hr := range hrs {
		if s := ref(hr, "spec", "chart", "spec", "sourceRef"); !sources[s] {
			t.Errorf("HelmRelease %s: chart source %s is not in the layout", key, s)
		}
		chart, _, _ := unstructured.NestedString(hr.Object, "spec", "chart", "spec", "chart")
		if _, err := os.Stat(filepath.Join(root, chart, "Chart.yaml")); err != nil {
			t.Errorf("HelmRelease %s: chart %q is not this repository's chart", key, chart)
		}
		checkDriftIgnores(t, root, hr)
	}

	if testing.Short() {
		return
	}
	cp := testenv.Start(t, controlplane.Options{})
	kc, kubeconfig := kubectl(t, cp)
	out, err := exec.Command(kc, "--kubeconfig", kubeconfig, "apply", "-f", filepath.Join(root, "test", "gitops", "testdata", "flux-crds")).CombinedOutput()
	if err != nil {
		t.Fatalf("install Flux's CRDs: %v\n%s", err, out)
	}
	if out, err := exec.Command(kc, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(root, "test", "gitops", "testdata", "flux-crds")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, ns := range []string{"flux-system", "heatsink-system"} {
		if err := cp.CreateNamespace(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	f := filepath.Join(t.TempDir(), "flux.yaml")
	if err := os.WriteFile(f, []byte(opBlock.Text+"\n---\n"+ksBlock.Text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(kc, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "--validate=strict", "-f", f).CombinedOutput()
	if err != nil || bytes.Count(out, []byte("(server dry run)")) != len(objs) {
		t.Fatalf("Flux's CRDs refuse the documented objects: %v\n%s", err, out)
	}
}

// checkDriftIgnores renders the chart with the HelmRelease's values and
// checks that its drift detection ignores the caBundle of every webhook of
// the chart's webhook configurations: one not ignored would be reset by
// helm-controller after the manager set it.
func checkDriftIgnores(t *testing.T, root string, hr *unstructured.Unstructured) {
	t.Helper()
	values, _, _ := unstructured.NestedMap(hr.Object, "spec", "values")
	vb, _ := yaml.Marshal(values)
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, vb, 0o600); err != nil {
		t.Fatal(err)
	}
	helm := os.Getenv("HELM_BIN")
	if helm == "" {
		m, _ := filepath.Glob(filepath.Join(root, "bin", "helm-v*"))
		sort.Strings(m)
		if len(m) == 0 {
			t.Fatal("helm not found: run `make helm`")
		}
		helm = m[len(m)-1]
	}
	out, err := exec.Command(helm, "template", "heatsink", filepath.Join(root, "charts", "heatsink"), "-n", "heatsink-system", "-f", vf).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	ignored := map[string]bool{}
	rules, _, _ := unstructured.NestedSlice(hr.Object, "spec", "driftDetection", "ignore")
	for _, r := range rules {
		rm := r.(map[string]any)
		kind, _, _ := unstructured.NestedString(rm, "target", "kind")
		paths, _, _ := unstructured.NestedStringSlice(rm, "paths")
		for _, p := range paths {
			ignored[kind+p] = true
		}
	}
	for _, o := range decodeAll(t, string(out)) {
		if o.GetKind() != "MutatingWebhookConfiguration" && o.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for i := range hooks {
			if p := fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i); !ignored[o.GetKind()+p] {
				t.Errorf("HelmRelease drift detection does not ignore %s of %s", p, o.GetKind())
			}
		}
	}
}
