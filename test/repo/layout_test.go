package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReadmeLayoutMatchesTheTree checks the README's layout table against
// the repository: every top-level folder git tracks has its row, every row
// names a folder that exists, and every subfolder a row names in
// backquotes exists beneath it. A newcomer finds any behaviour in one hop
// from that table only while it is true.
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	r := root(t)
	readme, err := os.ReadFile(filepath.Join(r, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+/)` \\| (.*)$")
	sub := regexp.MustCompile("`([a-z0-9][-a-z0-9/]*/)`")
	var listed []string
	named := map[string]bool{} // every folder a row is or names
	for _, m := range row.FindAllStringSubmatch(layout, -1) {
		dir := strings.TrimSuffix(m[1], "/")
		listed = append(listed, strings.Split(dir, "/")[0])
		named[dir] = true
		if fi, err := os.Stat(filepath.Join(r, dir)); err != nil || !fi.IsDir() {
			t.Errorf("README layout row %q: no such folder", m[1])
			continue
		}
		for _, s := range sub.FindAllStringSubmatch(m[2], -1) {
			if fi, err := os.Stat(filepath.Join(r, dir, s[1])); err != nil || !fi.IsDir() {
				t.Errorf("README layout row %q names %q: no folder %s", m[1], s[1], filepath.Join(dir, s[1]))
			}
			named[filepath.Join(dir, strings.TrimSuffix(s[1], "/"))] = true
		}
	}
	out, err := exec.Command("git", "-C", r, "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	var tracked []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if top, rest, isDir := strings.Cut(f, "/"); isDir && rest != "" && !strings.HasPrefix(top, ".") && !slices.Contains(tracked, top) {
			tracked = append(tracked, top)
		}
	}
	for _, pkg := range goPackages(strings.Split(string(out), "\n")) {
		if !coveredBy(pkg, named) {
			t.Errorf("Go package %s is named by no README layout row (name it, or a folder above it below the top level, in backquotes)", pkg)
		}
	}
	slices.Sort(tracked)
	slices.Sort(listed)
	listed = slices.Compact(listed)
	if d := cmp.Diff(tracked, listed); d != "" {
		t.Errorf("top-level folders (-git ls-files +README layout):\n%s", d)
	}
}

// goPackages is the folders below the top level that hold tracked Go files
// (testdata excluded): the packages, of both modules, a reader must find in
// the layout table.
func goPackages(files []string) []string {
	var out []string
	for _, f := range files {
		dir := filepath.Dir(f)
		if !strings.HasSuffix(f, ".go") || !strings.Contains(dir, "/") || strings.Contains(dir, "testdata") || slices.Contains(out, dir) {
			continue
		}
		out = append(out, dir)
	}
	return out
}

// coveredBy reports whether the table names pkg or a folder above it that
// is not a top-level one (naming `controllers/` says nothing of
// controllers/hub; naming `internal/testing/` covers its harnesses).
func coveredBy(pkg string, named map[string]bool) bool {
	for d := pkg; strings.Contains(d, "/"); d = filepath.Dir(d) {
		if named[d] {
			return true
		}
	}
	return false
}
