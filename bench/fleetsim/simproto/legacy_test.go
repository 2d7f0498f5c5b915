package simproto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLegacyNodeSimulatorBuilds builds the legacy node simulator inside an
// export of the legacy tree (bench/fleetsim/legacy/ref), assembled by
// bench/fleetsim/legacy/assemble.sh with this package's files, as make
// bench does: a change to this package that breaks it would otherwise
// surface only in a benchmark run.
func TestLegacyNodeSimulatorBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an old tree of heatsink")
	}
	ref, err := os.ReadFile(filepath.Join("..", "legacy", "ref"))
	if err != nil {
		t.Fatal(err)
	}
	legacyRef := strings.TrimSpace(string(ref))
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if err := exec.Command("git", "cat-file", "-e", legacyRef+"^{commit}").Run(); err != nil {
		t.Skipf("%s is not in this clone's history (shallow?)", legacyRef)
	}
	tree := t.TempDir()
	var errs bytes.Buffer
	archive := exec.Command("git", "archive", legacyRef)
	archive.Dir = filepath.Join("..", "..", "..") // the whole tree, not this directory's part
	untar := exec.Command("tar", "-x", "-C", tree)
	untar.Stdin, _ = archive.StdoutPipe()
	archive.Stderr, untar.Stderr = &errs, &errs
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", legacyRef, err, errs.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v: %s", err, errs.String())
	}
	if out, err := exec.Command(filepath.Join("..", "legacy", "assemble.sh"), tree).CombinedOutput(); err != nil {
		t.Fatalf("assemble.sh: %v\n%s", err, out)
	}
	build := exec.Command("go", "build", "-o", os.DevNull, "./cmd/nodesim")
	build.Dir = tree
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the legacy node simulator does not build against this simproto: %v\n%s", err, out)
	}
}
