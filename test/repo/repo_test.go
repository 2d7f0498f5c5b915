// Package repo tests properties of the repository itself: its licence,
// that `make fuzz` (hack/fuzz.sh) runs every fuzz target, that the README's
// layout matches the tree, that every policy field has its test, and that
// git tracks no built output.
package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLicenseIsApache2 checks the LICENSE file: the Apache License 2.0, as
// Kubernetes projects use.
func TestLicenseIsApache2(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root(t), "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
}

// fuzzTargets finds every func FuzzXxx(*testing.F) of the module's tests by
// parsing them, as "./dir Name".
func fuzzTargets(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "bin", "bench", ".git", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Fuzz") {
				rel, _ := filepath.Rel(root, filepath.Dir(path))
				out = append(out, "./"+rel+" "+fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestFuzzRunsEveryTarget checks that hack/fuzz.sh (make fuzz) knows every
// fuzz target of the module, and runs one for 2,000 inputs (a count, not a
// time: with -fuzztime 1s a loaded machine sometimes ends the run with
// "context deadline exceeded" while a worker is still running an input).
func TestFuzzRunsEveryTarget(t *testing.T) {
	r := root(t)
	cmd := exec.Command(filepath.Join(r, "hack", "fuzz.sh"), "--list")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/fuzz.sh --list: %v", err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := fuzzTargets(t, r)
	if len(want) == 0 {
		t.Fatal("no fuzz target found by parsing the tests")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("hack/fuzz.sh --list differs from the module's fuzz targets (-parsed +script):\n%s", d)
	}
	if testing.Short() {
		return
	}
	run := exec.Command(filepath.Join(r, "hack", "fuzz.sh"), "2000x", `keyfilter FuzzMatch$`)
	if b, err := run.CombinedOutput(); err != nil || !strings.Contains(string(b), "1 targets passed") {
		t.Fatalf("hack/fuzz.sh 2000x: %v\n%s", err, b)
	}
}
