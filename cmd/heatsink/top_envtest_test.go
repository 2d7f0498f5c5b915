package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/docblock"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/testenv"
)

// The keys the top tests write: a viral product page (moved), a counter, a
// binary session key with an escape sequence in it (it must not reach the
// terminal), a UTF-8 key, and a key too long for its column.
const (
	keyViral   = "product:viral-1"
	keyLikes   = "likes:post:4"
	keyBinary  = "session:\x00\x1b[2J"
	keyUTF8    = "catégorie:été"
	keyLong    = "product:catalogue:summer-sale-2026:item:000123456:variant:blue"
	keyLongCut = "product:cata…ariant:blue"
)

// topFixture writes, in namespace shop, the catalogue policy (as
// config/samples has it, Enforce) with two moved keys in its status and its
// report of five keys (two with a size), and a second policy in namespace stock (Observe, no
// report yet).
func topFixture(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"shop", "stock"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	applyFile(t, cp.Client, filepath.Join(cp.Root, "config", "samples", "heatsink_v1alpha1_hotkeypolicy_catalogue.yaml"))
	p := &v1alpha1.HotKeyPolicy{}
	if err := cp.Client.Get(ctx, nsName("shop", "catalogue"), p); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	since := metav1.NewTime(now.Add(-3 * time.Minute))
	p.Status.HotKeyCount = 2
	p.Status.HotKeys = []v1alpha1.HotKeyStatus{
		{Key: keyLikes, ReadsPerSecond: 100, WritesPerSecond: 1900, Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationReplicate}, Replicas: 4, Source: v1alpha1.SourceDetected, Since: &since},
		{Key: keyViral, ReadsPerSecond: 48000, Mitigations: []v1alpha1.MitigationType{v1alpha1.MitigationCoalesce, v1alpha1.MitigationLocalCache}, Source: v1alpha1.SourceDetected, Since: &since},
	}
	if err := cp.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	rep := &v1alpha1.HotKeyReport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue"}, Spec: v1alpha1.HotKeyReportSpec{
		PolicyName: "catalogue", Window: metav1.Duration{Duration: 10 * time.Second}, GeneratedAt: metav1.NewTime(now.Add(-4 * time.Second)), Nodes: 3,
		UnseenReadsPerSecond: 40,
		Candidates: []v1alpha1.Candidate{
			{Key: keyViral, ReadsPerSecond: 48210, BytesPerSecond: 12_400_000, Exact: true},
			{Key: keyLikes, ReadsPerSecond: 100, WritesPerSecond: 1900, BytesPerSecond: 30_000, Exact: true},
			{Key: keyLong, ReadsPerSecond: 4100, WritesPerSecond: 3, BytesPerSecond: 2_000_000, Exact: true},
			{Key: keyBinary, ReadsPerSecond: 2600, BytesPerSecond: 900},
			{Key: keyUTF8, ReadsPerSecond: 2550, BytesPerSecond: 80_000},
		},
		// The long key's size as MEMORY USAGE confirmed it, the viral page's
		// as seen (the largest value a read returned).
		BigKeys: []v1alpha1.BigKey{
			{Key: keyLong, ValueBytes: 1_900_000, MemoryBytes: 2_400_000, Big: true},
			{Key: keyViral, ValueBytes: 250},
		},
	}}
	if err := cp.Client.Create(ctx, rep); err != nil {
		t.Fatal(err)
	}
	obs := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "stock", Name: "inventory"}}
	obs.Spec.Mode = v1alpha1.ModeObserve
	obs.Spec.Target.Addresses = []string{"redis.stock.svc:6379"}
	if err := cp.Client.Create(ctx, obs); err != nil {
		t.Fatal(err)
	}
}

func nsName(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// tokenKubeconfig writes a kubeconfig that authenticates with token, its
// context's namespace ns, as a user's kubeconfig would.
func tokenKubeconfig(t *testing.T, cp *controlplane.ControlPlane, token, ns string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user", Namespace: ns}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustTop(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := heatsink(t, append([]string{"top"}, args...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("heatsink top %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	return stdout
}

// TestTopAgainstAPIServer runs `heatsink top --once` against a real API
// server, as an administrator, in both forms: the table within 80 columns,
// keys escaped and cut in the middle, the move and its age beside the
// report's rates; the JSON with the keys as they are.
func TestTopAgainstAPIServer(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	topFixture(t, cp)
	admin := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(admin); err != nil {
		t.Fatal(err)
	}

	table := mustTop(t, "--kubeconfig", admin, "-n", "shop", "catalogue", "--once")
	for _, l := range strings.Split(table, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line of %d columns: %q", n, l)
		}
		if strings.ContainsAny(l, "\x00\x1b") {
			t.Errorf("a control character reached the terminal: %q", l)
		}
	}
	fields := func(prefix string) []string {
		for _, l := range strings.Split(table, "\n") {
			if strings.HasPrefix(l, prefix) {
				return strings.Fields(l)
			}
		}
		t.Errorf("no line starts with %q:\n%s", prefix, table)
		return nil
	}
	wants := map[string][]string{
		"KEY ":         {"KEY", "READS/s", "WRITES/s", "BYTES/s", "SIZE", "MOVE", "SINCE"},
		"shop/":        {"shop/catalogue", "Enforce", "report", "4s", "old,", "10s", "window,", "3", "nodes", "moved", "2"},
		keyViral + " ": {keyViral, "48210", "0", "11.8Mi", "250", "Coalesce+Cache", "3m"},
		keyLikes + " ": {keyLikes, "100", "1900", "29.3Ki", "-", "Replicas=4", "3m"},
		keyLongCut:     {keyLongCut, "4100", "3", "1.91Mi", "2.29Mi", "-", "-"},
		`session:\x00`: {`session:\x00\x1b[2J`, "~2600", "~0", "900", "-", "-", "-"},
		keyUTF8:        {keyUTF8, "~2550", "~0", "78.1Ki", "-", "-", "-"},
		"~ upper":      {"~", "upper", "bound:", "the", "key", "is", "not", "counted", "exactly", "on", "every", "node", "yet"},
	}
	// Ages (the report's, a move's) depend on when the command runs: compared
	// as ages, their values in the JSON below.
	age := regexp.MustCompile(`^\d+[smhd](\d+[sm])?$`)
	ages := func(fs []string) string {
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i] = age.ReplaceAllString(f, "AGE")
		}
		return strings.Join(out, " ")
	}
	for prefix, want := range wants {
		if got := fields(prefix); ages(got) != ages(want) {
			t.Errorf("line %q:\n got %q\nwant %q", prefix, got, want)
		}
	}

	// JSON: every policy of every namespace with -A, keys unescaped.
	out := mustTop(t, "--kubeconfig="+admin, "-A", "-o", "json", "--once", "--sort=bytes", "--limit=3")
	var f struct {
		Sort     string
		Policies []struct {
			Namespace, Name, Mode string
			HotKeyCount           int32
			More                  int
			Report                *struct {
				GeneratedAt          time.Time
				Nodes                int32
				UnseenReadsPerSecond int64
				Window               string
			}
			Keys []struct {
				Key                                             string
				ReadsPerSecond, WritesPerSecond, BytesPerSecond int64
				Exact                                           bool
				Mitigations                                     []string
				Replicas                                        int32
				Source                                          string
				Since                                           *time.Time
				SizeBytes                                       int64
				SizeConfirmed                                   bool
			}
		}
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("--once -o json printed %d lines, want one document:\n%s", strings.Count(out, "\n"), out)
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if f.Sort != "bytes" || len(f.Policies) != 2 {
		t.Fatalf("want 2 policies sorted by bytes: %s", out)
	}
	shop, stock := f.Policies[0], f.Policies[1]
	if shop.Namespace != "shop" || shop.Mode != "Enforce" || shop.HotKeyCount != 2 || shop.More != 2 || shop.Report == nil ||
		shop.Report.Nodes != 3 || time.Since(shop.Report.GeneratedAt) < 4*time.Second || shop.Report.UnseenReadsPerSecond != 40 || shop.Report.Window != "10s" {
		t.Errorf("shop/catalogue: %+v", shop)
	}
	var keys []string
	for _, k := range shop.Keys {
		keys = append(keys, k.Key)
	}
	if strings.Join(keys, "|") != strings.Join([]string{keyViral, keyLong, keyUTF8}, "|") {
		t.Errorf("keys by bytes, 3 of them: %q", keys)
	}
	if k := shop.Keys[0]; k.BytesPerSecond != 12_400_000 || !k.Exact || strings.Join(k.Mitigations, "+") != "Coalesce+LocalCache" ||
		k.Source != "Detected" || k.Since == nil || time.Since(*k.Since) < 3*time.Minute {
		t.Errorf("%s: %+v", keyViral, k)
	}
	if k := shop.Keys[0]; k.SizeBytes != 250 || k.SizeConfirmed {
		t.Errorf("%s: size %d confirmed %v, want 250 as seen", keyViral, k.SizeBytes, k.SizeConfirmed)
	}
	if k := shop.Keys[1]; k.SizeBytes != 2_400_000 || !k.SizeConfirmed {
		t.Errorf("%s: size %d confirmed %v, want 2400000 confirmed", keyLong, k.SizeBytes, k.SizeConfirmed)
	}
	if stock.Namespace != "stock" || stock.Mode != "Observe" || stock.Report != nil || len(stock.Keys) != 0 {
		t.Errorf("stock/inventory: %+v", stock)
	}
	// The binary key, unescaped, by --sort=reads and no limit.
	out = mustTop(t, "--kubeconfig="+admin, "--namespace=shop", "-o=json", "--once", "--sort=reads", "--limit=0")
	if !strings.Contains(out, `"key":"session:\u0000\u001b[2J"`) {
		t.Errorf("the binary key is not in the JSON as it is:\n%s", out)
	}

	// Errors a user meets: an unknown policy, a context the kubeconfig lacks.
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no such policy":  {[]string{"--kubeconfig", admin, "-n", "shop", "nosuch", "--once"}, `no HotKeyPolicy "nosuch" in namespace "shop"`},
		"no such context": {[]string{"--kubeconfig", admin, "--context", "nosuch", "--once"}, `context "nosuch" does not exist`},
	} {
		code, stdout, stderr := heatsink(t, append([]string{"top"}, tc.args...)...)
		if code != 1 || stdout != "" || strings.Count(stderr, tc.want) != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and %q once", name, code, stdout, stderr, tc.want)
		}
	}
}

// TestTopNeedsOnlyTheViewerRole runs top as ServiceAccounts: one bound to
// heatsink-view in its namespace sees the keys, one without it gets an
// error that names the role to ask for. (The built-in view role includes
// heatsink-view through aggregation, which kube-controller-manager does;
// this control plane has none, so the test binds heatsink-view itself.)
func TestTopNeedsOnlyTheViewerRole(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	topFixture(t, cp)
	applyFile(t, cp.Client, filepath.Join(cp.Root, "config", "rbac", "aggregate_roles.yaml"))
	_, viewer := serviceAccountConfig(t, cp, "shop", "viewer")
	_, nosy := serviceAccountConfig(t, cp, "shop", "nosy")
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "viewer-heatsink-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "heatsink-view"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "shop", Name: "viewer"}}}
	if err := cp.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}

	// The context's namespace is shop: no -n needed.
	out := mustTop(t, "--kubeconfig", tokenKubeconfig(t, cp, viewer, "shop"), "--once")
	if !strings.Contains(out, "shop/catalogue  Enforce") || !strings.Contains(out, keyViral) {
		t.Errorf("the viewer does not see the keys:\n%s", out)
	}
	for name, tc := range map[string]struct {
		token string
		args  []string
		want  []string
	}{
		"viewer, another namespace": {viewer, []string{"-n", "stock"}, []string{`cannot list resource "hotkeypolicies"`, `namespace "stock"`, "heatsink-view"}},
		"viewer, every namespace":   {viewer, []string{"-A"}, []string{`cannot list resource "hotkeypolicies"`, "every namespace", "heatsink-view"}},
		"no role":                   {nosy, nil, []string{`"system:serviceaccount:shop:nosy" cannot list resource "hotkeypolicies"`, `namespace "shop"`, "heatsink-view"}},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"top", "--kubeconfig", tokenKubeconfig(t, cp, tc.token, "shop"), "--once"}, tc.args...)
			code, stdout, stderr := heatsink(t, args...)
			if code != 1 || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	// Live, the viewer's watch works too: see TestTopFollowsChanges.
}

// TestTopFollowsChanges runs top live (a watch, --interval=100ms, JSON) as
// a viewer and changes the report, then deletes it: later frames show each
// change, with no restart.
func TestTopFollowsChanges(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	ctx := context.Background()
	topFixture(t, cp)
	applyFile(t, cp.Client, filepath.Join(cp.Root, "config", "rbac", "aggregate_roles.yaml"))
	_, viewer := serviceAccountConfig(t, cp, "shop", "viewer")
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "viewer-heatsink-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "heatsink-view"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "shop", Name: "viewer"}}}
	if err := cp.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "top", "catalogue", "--kubeconfig", tokenKubeconfig(t, cp, viewer, "shop"), "-o", "json", "--interval=100ms")
	cmd.Env = append(os.Environ(), "HEATSINK_CLI_SELF=1", "KUBECONFIG=", "HOME="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	frames := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			frames <- sc.Text()
		}
		close(frames)
	}()
	readsOf := func(frame, key string) int64 {
		var f struct {
			Policies []struct {
				Keys []struct {
					Key            string
					ReadsPerSecond int64
				}
			}
		}
		if err := json.Unmarshal([]byte(frame), &f); err != nil {
			t.Fatalf("%v: %s", err, frame)
		}
		for _, p := range f.Policies {
			for _, k := range p.Keys {
				if k.Key == key {
					return k.ReadsPerSecond
				}
			}
		}
		return -1
	}
	next := func() string {
		select {
		case fr, ok := <-frames:
			if !ok {
				t.Fatalf("top ended: %s", stderr.String())
			}
			return fr
		case <-time.After(30 * time.Second):
			t.Fatal("no frame in 30 s")
		}
		return ""
	}
	if got := readsOf(next(), keyViral); got != 48210 {
		t.Fatalf("first frame: %s reads %d, want 48210", keyViral, got)
	}
	rep := &v1alpha1.HotKeyReport{}
	if err := cp.Client.Get(ctx, nsName("shop", "catalogue"), rep); err != nil {
		t.Fatal(err)
	}
	rep.Spec.Candidates[0].ReadsPerSecond = 99_000
	if err := cp.Client.Update(ctx, rep); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "a frame shows the new rate", func() bool { return readsOf(next(), keyViral) == 99_000 })
	// A deleted report leaves the view (the policy stays, with its moved keys).
	if err := cp.Client.Delete(ctx, rep); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "a frame without the report", func() bool {
		fr := next()
		return !strings.Contains(fr, `"report":`) && readsOf(fr, keyViral) == 48000 && readsOf(fr, keyLong) == -1
	})
}

// TestTopDocSample checks the sample in docs/top.md against what `heatsink
// top` prints for the test's objects: the same lines, the ages and the
// clock aside (they depend on when it runs).
func TestTopDocSample(t *testing.T) {
	cp := testenv.Start(t, controlplane.Options{})
	topFixture(t, cp)
	admin := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	got := mustTop(t, "--kubeconfig", admin, "-n", "shop", "--once")
	sample := docblock.Get(t, docblock.Load(t, cp.Root, "docs/top.md"), "top-sample").Text
	if normalizeTop(sample) != normalizeTop(got) {
		t.Errorf("docs/top.md's sample is not what top prints; it prints:\n%s", got)
	}
	got = mustTop(t, "--kubeconfig", admin, "-n", "shop", "--once", "-o", "json", "--limit=1")
	sample = docblock.Get(t, docblock.Load(t, cp.Root, "docs/top.md"), "top-json").Text
	if topClock.ReplaceAllString(strings.Join(strings.Fields(sample), ""), "CLOCK") != topClock.ReplaceAllString(strings.TrimSpace(got), "CLOCK") {
		t.Errorf("docs/top.md's JSON sample is not what top prints; it prints:\n%s", got)
	}
}

var (
	topClock = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	topAge   = regexp.MustCompile(`(^|\s)\d+[smhd](\d+[smh])?(\s|$)`)
)

// normalizeTop blanks what changes from run to run: the clock, ages, the
// spacing they shift.
func normalizeTop(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		l = topClock.ReplaceAllString(l, "CLOCK")
		l = strings.Join(strings.Fields(l), "  ")
		for topAge.MatchString(l) {
			l = topAge.ReplaceAllString(l, "${1}AGE${3}")
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
