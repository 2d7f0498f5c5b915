package injectlink_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/injectlink"
)

// TestNamesListsEveryConstant: Names is what test/repo checks the rest of
// the repository against, so a variable added to env.go and not to Names
// could be spelled out elsewhere unseen. Every Env constant is in Names,
// once, and every name is HEATSINK_ and upper case.
func TestNamesListsEveryConstant(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "env.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					t.Fatalf("a constant of env.go is not a string literal: %T", v)
				}
				name, _ := strconv.Unquote(lit.Value)
				declared = append(declared, name)
			}
		}
	}
	names := slices.Clone(injectlink.Names)
	for _, n := range names {
		if !strings.HasPrefix(n, "HEATSINK_") || strings.ToUpper(n) != n {
			t.Errorf("%q: not a HEATSINK_ upper-case name", n)
		}
	}
	slices.Sort(declared)
	slices.Sort(names)
	if !slices.Equal(declared, names) {
		t.Errorf("Names = %v\nenv.go declares %v", names, declared)
	}
	if len(slices.Compact(names)) != len(injectlink.Names) {
		t.Errorf("Names lists a variable twice: %v", injectlink.Names)
	}
}

// TestHTTPAddressIsHTTPPort: the container port the probes use is the
// port the sidecar listens on.
func TestHTTPAddressIsHTTPPort(t *testing.T) {
	_, port, err := net.SplitHostPort(injectlink.HTTPAddress)
	if err != nil || port != strconv.Itoa(injectlink.HTTPPort) {
		t.Errorf("HTTPAddress %q, HTTPPort %d", injectlink.HTTPAddress, injectlink.HTTPPort)
	}
}
