package repo

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/injectlink"
)

// heatsinkVar is how a variable of the heatsink namespace is spelled.
var heatsinkVar = regexp.MustCompile(`HEATSINK_[A-Z0-9_*]*`)

// TestHeatsinkVariablesOnlyInInjectlink checks every tracked Go file's
// string literals: none outside package injectlink spells one of the
// variables the injector and the sidecar share (injectlink.Names), so each
// side names them through the package and neither can rename one alone;
// and no shipped (non-test) file outside injectlink spells any HEATSINK_
// name, so a variable the sidecar comes to read is added to the contract,
// not beside it. The harnesses' own switches (HEATSINK_BIN, read by
// internal/testing, and the tests' HEATSINK_DIFF_SEEDS and the like) are
// not the contract. Comments are free to name the variables.
func TestHeatsinkVariablesOnlyInInjectlink(t *testing.T) {
	r := root(t)
	out, err := exec.Command("git", "-C", r, "ls-files", "-z", "*.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	checked := 0
	for _, path := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if path == "" || strings.HasPrefix(path, "injectlink/") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(r, path))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		checked++
		shipped := !strings.HasSuffix(path, "_test.go") && !strings.HasPrefix(path, "internal/testing/")
		for _, p := range heatsinkLiterals(t, path, src, shipped) {
			t.Error(p)
		}
	}
	if checked == 0 {
		t.Fatal("git tracks no Go file")
	}
}

// heatsinkLiterals is what the file at path spells that it must not: in
// any file, a variable of injectlink.Names; in a shipped one, any HEATSINK_
// name.
func heatsinkLiterals(t *testing.T, path string, src []byte, shipped bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var problems []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			s = lit.Value
		}
		for _, name := range heatsinkVar.FindAllString(s, -1) {
			switch {
			case slices.Contains(injectlink.Names, name):
				problems = append(problems, fmt.Sprintf("%s: %q spells the injector ↔ sidecar variable %s: use its injectlink constant", fset.Position(lit.Pos()), s, name))
			case shipped:
				problems = append(problems, fmt.Sprintf("%s: %q names %s outside package injectlink: a variable the sidecar or the injector reads belongs to the contract", fset.Position(lit.Pos()), s, name))
			}
		}
		return true
	})
	return problems
}
