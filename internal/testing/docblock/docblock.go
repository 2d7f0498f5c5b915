// Package docblock reads the tested snippets of the documentation: a fenced
// code block preceded by the line
//
//	<!-- test: NAME -->
//
// is the snippet NAME. Tests run them (shell blocks) or use them (YAML, Lua),
// so the docs cannot drift from what works. Untagged blocks are illustrations
// and are not run.
package docblock

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Block is one tagged snippet.
type Block struct {
	Name string
	Lang string // the fence's info string: sh, yaml, lua...
	Text string
	Line int // of the opening fence, 1-based
}

var tag = regexp.MustCompile(`^<!--\s*test:\s*([A-Za-z0-9_.-]+)\s*-->\s*$`)

// Parse returns the tagged blocks of a Markdown document by name.
func Parse(doc []byte) (map[string]Block, error) {
	out := map[string]Block{}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var pending string
	var cur *Block
	var fence string
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil:
			if trimmed == fence {
				out[cur.Name] = *cur
				cur = nil
				continue
			}
			cur.Text += line + "\n"
		case pending != "":
			if trimmed == "" {
				continue
			}
			if !strings.HasPrefix(trimmed, "```") {
				return nil, fmt.Errorf("line %d: <!-- test: %s --> is not followed by a code block", n, pending)
			}
			if _, dup := out[pending]; dup {
				return nil, fmt.Errorf("line %d: block %q tagged twice", n, pending)
			}
			fence = strings.Repeat("`", len(trimmed)-len(strings.TrimLeft(trimmed, "`")))
			cur = &Block{Name: pending, Lang: strings.TrimSpace(strings.TrimLeft(trimmed, "`")), Line: n}
			pending = ""
		default:
			if m := tag.FindStringSubmatch(trimmed); m != nil {
				pending = m[1]
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("block %q: no closing fence", cur.Name)
	}
	if pending != "" {
		return nil, fmt.Errorf("<!-- test: %s --> at the end of the document", pending)
	}
	return out, sc.Err()
}

// Load parses the document at path (relative to the repository root).
func Load(t testing.TB, root, path string) map[string]Block {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return blocks
}

// Get returns the named block or fails the test.
func Get(t testing.TB, blocks map[string]Block, name string) Block {
	t.Helper()
	b, ok := blocks[name]
	if !ok {
		t.Fatalf("the documentation has no block tagged <!-- test: %s -->", name)
	}
	return b
}

// Shell is where a shell block runs: the working directory (the repository
// root, as the docs assume) and the tools the block calls, by name.
type Shell struct {
	Dir   string
	Tools map[string]string // name (kubectl, helm) -> path
	Env   []string
}

// Run runs a shell block with bash -euo pipefail and returns its output.
// The tools are put first on PATH under their names, so the block reads as
// a user types it.
func (s Shell) Run(t testing.TB, b Block) string {
	t.Helper()
	if b.Lang != "sh" && b.Lang != "bash" && b.Lang != "shell" {
		t.Fatalf("block %q is %q, not a shell block", b.Name, b.Lang)
	}
	bin := t.TempDir()
	for name, path := range s.Tools {
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.Text)
	cmd.Dir = s.Dir
	cmd.Env = append(append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), s.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("block %q (line %d) failed: %v\n--- block\n%s--- output\n%s", b.Name, b.Line, err, b.Text, out)
	}
	return string(out)
}
