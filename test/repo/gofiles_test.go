package repo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxGoLines is the most lines a Go file may have. A file past it holds more
// than one concern: split it by concern (as the proxy's session, the engine
// and the fleet simulator's run are), not by line count.
const maxGoLines = 800

// TestGoFilesAreSmall checks every tracked Go file but the generated ones
// (controller-gen's deepcopy), which no one edits.
func TestGoFilesAreSmall(t *testing.T) {
	r := root(t)
	if _, err := os.Stat(filepath.Join(r, ".git")); err != nil {
		t.Skipf("%s is not a git checkout (%v): no tracked files to check", r, err)
	}
	out, err := exec.Command("git", "-C", r, "ls-files", "-z", "*.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	n := 0
	for _, path := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if path == "" || strings.HasPrefix(filepath.Base(path), "zz_generated") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r, path))
		if err != nil {
			t.Fatal(err)
		}
		n++
		if lines := bytes.Count(b, []byte("\n")); lines > maxGoLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", path, lines, maxGoLines)
		}
	}
	if n == 0 {
		t.Fatal("git tracks no Go file")
	}
}
