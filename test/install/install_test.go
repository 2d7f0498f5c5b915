// Package install tests that heatsink installs like any operator: the Helm
// chart lints, and the chart (with default and non-default values) and the
// kustomize overlay config/default render manifests that a real API server
// accepts in a server-side dry run; both install the same objects.
//
// The tools come from bin/: helm (HELM_BIN, built by `make helm`) and kubectl
// with its built-in kustomize (bin/k8s/<version>/kubectl, built by
// `make envtest`). A missing tool fails the test with the make target to run;
// with -short (unit tests only) these tests are skipped.
package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

const namespace = "heatsink-system"

type tools struct{ root, helm, kubectl string }

func findTools(t *testing.T) tools {
	t.Helper()
	if testing.Short() {
		t.Skip("runs helm and kubectl from bin/; skipped with -short")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := os.Getenv("HELM_BIN")
	if helm == "" {
		matches, _ := filepath.Glob(filepath.Join(root, "bin", "helm-v*"))
		sort.Strings(matches)
		if len(matches) > 0 {
			helm = matches[len(matches)-1]
		}
	}
	if _, err := os.Stat(helm); helm == "" || err != nil {
		t.Fatalf("helm not found (HELM_BIN=%q): run `make helm`, which builds it into bin/ from the Go module proxy", helm)
	}
	v := os.Getenv("K8S_VERSION")
	if v == "" {
		v = controlplane.DefaultK8sVersion
	}
	kubectl := filepath.Join(root, "bin", "k8s", v, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl (and its built-in kustomize) not found at %s: run `make envtest`", kubectl)
	}
	return tools{root: root, helm: helm, kubectl: kubectl}
}

func run(t *testing.T, dir string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes()
}

// valueSets are the chart configurations under test, by name.
var valueSets = map[string][]string{
	"default":             nil,
	"ha-certmanager":      {"-f", "testdata/values-ha-certmanager.yaml"},
	"minimal":             {"-f", "testdata/values-minimal.yaml"},
	"one-replica":         {"--set", "manager.replicas=1", "--set", "metrics.serviceMonitor.enabled=true"},
	"node-agent-hostport": {"--set", "nodeAgent.ingestMode=hostPort", "--set", "rbac.create=false"},
	"node-agent-capture":  {"--set", "nodeAgent.capture.enabled=true,nodeAgent.capture.sampleEvery=4,nodeAgent.capture.replySampleEvery=2"},
	"monitoring":          {"--set", "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true"},
	"secret-namespaces":   {"--set", "rbac.secretNamespaces={shop,social}", "--set", "manager.metricsSecure=false"},
	"openshift-style":     {"-f", "testdata/values-openshift.yaml"},
}

func helmTemplate(t *testing.T, tl tools, args []string) []byte {
	t.Helper()
	a := append([]string{"template", "heatsink", filepath.Join(tl.root, "charts", "heatsink"),
		"--namespace", namespace, "--include-crds", "--kube-version", kubeVersion()}, args...)
	return run(t, ".", tl.helm, a...)
}

func kubeVersion() string {
	if v := os.Getenv("K8S_VERSION"); v != "" {
		return v
	}
	return controlplane.DefaultK8sVersion
}

func TestHelmLint(t *testing.T) {
	tl := findTools(t)
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			a := append([]string{"lint", "--strict", "--kube-version", kubeVersion(), filepath.Join(tl.root, "charts", "heatsink")}, args...)
			run(t, ".", tl.helm, a...)
		})
	}
}

func TestHelmSchemaRejectsBadValues(t *testing.T) {
	tl := findTools(t)
	for name, set := range map[string]string{
		"unknown key":       "manager.replica=2",
		"zero replicas":     "manager.replicas=0",
		"bad cert source":   "webhook.certificates.source=vault",
		"bad pull policy":   "image.pullPolicy=Sometimes",
		"port out of range": "nodeAgent.ingestPort=70000",
		"bad ingest mode":   "nodeAgent.ingestMode=multicast",
		"zero sampling":     "nodeAgent.capture.sampleEvery=0",
		"reply sampling":    "nodeAgent.capture.replySampleEvery=65536",
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(tl.helm, "template", "x", filepath.Join(tl.root, "charts", "heatsink"), "--kube-version", kubeVersion(), "--set", set)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "values don't meet the specifications of the schema") {
				t.Fatalf("--set %s: want a schema error, got err=%v\n%s", set, err, out)
			}
		})
	}
}

// objects splits a multi-document manifest into objects.
func objects(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("decode manifest: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// dryRun applies manifest to the API server with a server-side dry run: the
// API server runs defaulting, validation and admission on every object.
func dryRun(t *testing.T, tl tools, kubeconfig string, manifest []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	out := run(t, ".", tl.kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "--validate=strict", "-f", f)
	if !bytes.Contains(out, []byte("(server dry run)")) {
		t.Fatalf("kubectl did not dry-run on the server:\n%s", out)
	}
}

// TestManifestsAcceptedByAPIServer renders the chart with every value set
// and builds config/default, and dry-runs each against a real API server
// that has the CRDs (heatsink's, and stand-ins for cert-manager's and
// prometheus-operator's kinds).
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	tl := findTools(t)
	cp := testenv.Start(t, controlplane.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	run(t, ".", tl.kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "testdata/crds")
	run(t, ".", tl.kubectl, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "-f", "testdata/crds")
	for _, ns := range []string{namespace, "shop", "social"} {
		if err := cp.CreateNamespace(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	for name, args := range valueSets {
		t.Run("helm/"+name, func(t *testing.T) {
			m := helmTemplate(t, tl, args)
			checkObjects(t, objects(t, m))
			dryRun(t, tl, kubeconfig, m)
		})
	}
	t.Run("kustomize/config-default", func(t *testing.T) {
		m := run(t, ".", tl.kubectl, "kustomize", filepath.Join(tl.root, "config", "default"))
		checkObjects(t, objects(t, m))
		dryRun(t, tl, kubeconfig, m)
	})
	t.Run("sample annotated Deployment", func(t *testing.T) {
		if err := cp.CreateNamespace(context.Background(), "shop"); err != nil {
			t.Fatal(err)
		}
		m, err := os.ReadFile(filepath.Join(tl.root, "config", "samples", "app_catalogue_deployment.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		dryRun(t, tl, kubeconfig, m)
	})
	t.Run("kustomize/documented-overlay", func(t *testing.T) {
		// docs/install.md's overlay: another namespace, another image, every
		// optional component (cert-manager, Prometheus, Grafana).
		if err := cp.CreateNamespace(context.Background(), overlayNamespace); err != nil {
			t.Fatal(err)
		}
		m := run(t, ".", tl.kubectl, "kustomize", documentedOverlay(t, tl.root))
		objs := objects(t, m)
		checkObjectsIn(t, objs, overlayNamespace)
		checkOverlayReferences(t, m, objs)
		kinds := summarize(t, objs).Kinds
		if kinds["Certificate"] != 1 || kinds["Issuer"] != 1 || kinds["ServiceMonitor"] != 2 || kinds["PodMonitor"] != 1 || kinds["PrometheusRule"] != 1 || kinds["ConfigMap"] != 1 {
			t.Errorf("components missing from the build: %v", kinds)
		}
		if !bytes.Contains(m, []byte("--webhook-cert-source=dir")) {
			t.Error("the certmanager component did not switch the manager to cert-manager's certificate")
		}
		dryRun(t, tl, kubeconfig, m)
	})
}

// checkObjects asserts what must hold of every install: workloads run
// restricted with no fixed user (OpenShift's restricted-v2 assigns one), on
// Linux nodes; the manager is spread and, with replicas, kept through
// drains; nothing lands outside the install namespace, except Roles a value
// asks for in application namespaces.
func checkObjects(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	checkObjectsIn(t, objs, namespace)
}

func checkObjectsIn(t *testing.T, objs []*unstructured.Unstructured, namespace string) {
	t.Helper()
	pdbs := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			pdbs[sel["app.kubernetes.io/component"]] = true
		}
	}
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && ns != namespace && !strings.HasSuffix(o.GetName(), "-manager-secrets") {
			t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), ns, namespace)
		}
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
		default:
			continue
		}
		what := o.GetKind() + " " + o.GetName()
		psc, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec", "securityContext")
		capturing := isCaptureAgent(o)
		if capturing {
			checkCaptureAgent(t, o)
		}
		if psc["runAsNonRoot"] != true && !capturing {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true: %v", what, psc)
		}
		for _, fixed := range []string{"runAsUser", "runAsGroup", "fsGroup"} {
			if _, ok := psc[fixed]; ok && !strings.HasPrefix(o.GetName(), "hs-") {
				t.Errorf("%s: pod securityContext.%s is set: a fixed ID is refused by OpenShift's restricted-v2", what, fixed)
			}
		}
		if os, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "nodeSelector", "kubernetes.io/os"); os != "linux" {
			t.Errorf("%s: nodeSelector kubernetes.io/os is %q, want linux (the binary is Linux only)", what, os)
		}
		if o.GetKind() == "Deployment" {
			spread, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "topologySpreadConstraints")
			if len(spread) == 0 {
				t.Errorf("%s: no topologySpreadConstraints", what)
			}
			replicas, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
			if replicas > 1 && !pdbs["manager"] {
				t.Errorf("%s: %d replicas and no PodDisruptionBudget", what, replicas)
			}
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			cm := c.(map[string]any)
			sc, _ := cm["securityContext"].(map[string]any)
			drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop")
			if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false || fmt.Sprint(drop) != "[ALL]" {
				t.Errorf("%s container %v is not restricted: %v", what, cm["name"], sc)
			}
			if _, ok := sc["runAsUser"]; ok && !strings.HasPrefix(o.GetName(), "hs-") && !capturing {
				t.Errorf("%s container %v: securityContext.runAsUser is set", what, cm["name"])
			}
			if _, ok := cm["resources"].(map[string]any)["requests"]; !ok {
				t.Errorf("%s container %v has no resource requests", what, cm["name"])
			}
		}
	}
}

// isCaptureAgent reports whether o is the node agent DaemonSet with the
// packet capture on (nodeAgent.capture.enabled).
func isCaptureAgent(o *unstructured.Unstructured) bool {
	if o.GetKind() != "DaemonSet" {
		return false
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
		if slices.Contains(args, "--capture") {
			return true
		}
	}
	return false
}

// checkCaptureAgent: the capturing node agent is the one workload allowed
// out of the restricted profile, and only as far as docs/capture.md says:
// the node's network namespace, root for CAP_NET_RAW alone (Kubernetes
// grants no capability to a non-root process), nothing else.
func checkCaptureAgent(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	if hn, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "hostNetwork"); !hn {
		t.Errorf("capturing node agent: hostNetwork is not true")
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		sc, _ := c.(map[string]any)["securityContext"].(map[string]any)
		add, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "add")
		if fmt.Sprint(add) != "[NET_RAW]" || sc["privileged"] != false {
			t.Errorf("capturing node agent: capabilities added %v, privileged %v; want [NET_RAW] only, unprivileged", add, sc["privileged"])
		}
	}
}

// summary is what an install consists of, independent of labels: kinds
// with their counts, webhook paths and failure policies, RBAC rules by kind,
// and the command line of every workload's containers.
type summary struct {
	Kinds    map[string]int
	Webhooks []string
	Rules    map[string][]string
	Args     map[string][]string
}

func summarize(t *testing.T, objs []*unstructured.Unstructured) summary {
	t.Helper()
	s := summary{Kinds: map[string]int{}, Rules: map[string][]string{}, Args: map[string][]string{}}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue // kustomize creates it; Helm is told to (--create-namespace)
		}
		s.Kinds[o.GetKind()]++
		switch o.GetKind() {
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				hm := h.(map[string]any)
				path, _, _ := unstructured.NestedString(hm, "clientConfig", "path")
				if path == "" {
					path, _, _ = unstructured.NestedString(hm, "clientConfig", "service", "path")
				}
				s.Webhooks = append(s.Webhooks, fmt.Sprintf("%s %s %v %v", o.GetName(), path, hm["failurePolicy"], hm["matchConditions"] != nil))
			}
		case "Deployment", "DaemonSet":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				cm := c.(map[string]any)
				args, _, _ := unstructured.NestedStringSlice(cm, "args")
				s.Args[fmt.Sprintf("%s/%s/%v", o.GetKind(), o.GetName(), cm["name"])] = args
			}
		case "ClusterRole", "Role":
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				s.Rules[o.GetKind()] = append(s.Rules[o.GetKind()], fmt.Sprint(r))
			}
		}
	}
	sort.Strings(s.Webhooks)
	for k := range s.Rules {
		sort.Strings(s.Rules[k])
	}
	return s
}

// TestKustomizeInstallsTheSameAsTheChart compares the default chart with
// config/default: the same kinds, webhooks and RBAC rules.
func TestKustomizeInstallsTheSameAsTheChart(t *testing.T) {
	tl := findTools(t)
	chart := summarize(t, objects(t, helmTemplate(t, tl, nil)))
	kust := summarize(t, objects(t, run(t, ".", tl.kubectl, "kustomize", filepath.Join(tl.root, "config", "default"))))
	if d := cmp.Diff(chart, kust); d != "" {
		t.Errorf("chart and config/default differ (-chart +kustomize):\n%s", d)
	}
}
