package repo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/heatsink-dev/heatsink/internal/release"
)

// versionRules are the mentions of heatsink's own version outside
// release.yaml: each regexp's first group must be the release tag ("tag",
// v0.1.0: git refs) or the bare SemVer ("semver", 0.1.0: images and charts).
var versionRules = []struct {
	re   *regexp.Regexp
	want string
	what string
}{
	{regexp.MustCompile(`/heatsink:(v?[0-9][-.0-9A-Za-z]*)`), "semver", "image reference"},
	{regexp.MustCompile(`newTag: *"?(v?[0-9][^\s"]*)`), "semver", "kustomize image tag"},
	{regexp.MustCompile(`targetRevision: *"?(v?[0-9][^\s"]*)`), "tag", "Argo CD revision"},
	{regexp.MustCompile(`ref: *\{ *tag: *"?(v?[0-9][^\s",}]*)`), "tag", "Flux git tag"},
	{regexp.MustCompile("oci://\\S*heatsink\\S* --version (v?[0-9][^\\s`'\")]*)"), "semver", "chart version"},
	{regexp.MustCompile(`heatsink-dev/heatsink/(?:tree|blob)/(v?[0-9][^/\s]*)`), "tag", "link to the release's tree"},
	{regexp.MustCompile(`sidecar-version!=(v?[0-9][^\s,'"]*)`), "semver", "sidecar version selector"},
	{regexp.MustCompile(`heatsink/internal/version\.Version=(v?[0-9][^\s"]*)`), "tag", "stamped version"},
}

// versionMentions finds every mention of the version in text that differs
// from f's.
func versionMentions(f release.File, text string) []string {
	var bad []string
	for i, line := range strings.Split(text, "\n") {
		for _, r := range versionRules {
			want := f.Version
			if r.want == "semver" {
				want = f.ImageTag()
			}
			for _, m := range r.re.FindAllStringSubmatch(line, -1) {
				if m[1] != want {
					bad = append(bad, fmt.Sprintf("line %d: %s %q, release.yaml says %q", i+1, r.what, m[1], want))
				}
			}
		}
	}
	return bad
}

// TestVersionMentionsFindsStaleOnes checks the checker: a stale tag in each
// place is found, the current ones are not.
func TestVersionMentionsFindsStaleOnes(t *testing.T) {
	f := release.File{Version: "v0.2.0"}
	good := "image: ghcr.io/heatsink-dev/heatsink:0.2.0\n  newTag: 0.2.0\n    targetRevision: v0.2.0\n  ref: {tag: v0.2.0}\nhelm install h oci://r/charts/heatsink --version 0.2.0\n"
	if bad := versionMentions(f, good); len(bad) != 0 {
		t.Errorf("current mentions reported: %v", bad)
	}
	for _, stale := range []string{
		"image: ghcr.io/heatsink-dev/heatsink:0.1.0", "image: registry.example.com/heatsink:0.1.0", "newTag: v0.2.0",
		"targetRevision: v0.1.0", "ref: {tag: v0.1.0}", "helm install h oci://r/charts/heatsink --version 0.1.0",
		"-ldflags -X github.com/heatsink-dev/heatsink/internal/version.Version=v0.1.0",
		"url: https://github.com/heatsink-dev/heatsink/blob/v0.1.0/CHANGELOG.md",
	} {
		if bad := versionMentions(f, stale); len(bad) != 1 {
			t.Errorf("%q: %d findings, want 1: %v", stale, len(bad), bad)
		}
	}
}

// TestVersionHasOnePlace checks that release.yaml is the one place of the
// version: the chart's version, appVersion and Artifact Hub image, every
// image reference and pinned tag in the docs, manifests, scripts and
// non-test Go files agree with it, and CHANGELOG.md starts with its section.
func TestVersionHasOnePlace(t *testing.T) {
	r := root(t)
	f, err := release.Load(r)
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version     string            `json:"version"`
		AppVersion  string            `json:"appVersion"`
		Annotations map[string]string `json:"annotations"`
	}
	b, err := os.ReadFile(filepath.Join(r, "charts/heatsink/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != f.ImageTag() || chart.AppVersion != f.ImageTag() {
		t.Errorf("Chart.yaml: version %q, appVersion %q; release.yaml says %q", chart.Version, chart.AppVersion, f.ImageTag())
	}
	if img := chart.Annotations["artifacthub.io/images"]; !strings.Contains(img, "ghcr.io/heatsink-dev/heatsink:"+f.ImageTag()) {
		t.Errorf("Chart.yaml: artifacthub.io/images %q does not name the image of %s", img, f.Version)
	}
	out, err := exec.Command("git", "-C", r, "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	checked := 0
	for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		ext := filepath.Ext(p)
		if strings.HasSuffix(p, "_test.go") || strings.Contains(p, "/testdata/") || strings.HasPrefix(p, "bench/") ||
			!(ext == ".md" || ext == ".yaml" || ext == ".yml" || ext == ".sh" || ext == ".go" || p == "Makefile" || p == "Dockerfile") ||
			p == release.FileName || p == "CHANGELOG.md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			continue // deleted in the work tree
		}
		checked++
		for _, bad := range versionMentions(f, string(b)) {
			t.Errorf("%s: %s", p, bad)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d files checked: the walk is broken", checked)
	}
	cl, err := os.ReadFile(filepath.Join(r, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	first := regexp.MustCompile(`(?m)^## (\S+)`).FindSubmatch(cl)
	if first == nil || string(first[1]) != f.Version {
		t.Errorf("CHANGELOG.md's first section is %q, want %s (release.yaml)", first, f.Version)
	}
}
