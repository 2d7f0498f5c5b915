package simproto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// legacyRef is the tree whose node simulator make bench runs as today's
// design (FLEET_BENCH_LEGACY_REF's default in hack/bench.d/50-fleet.sh).
const legacyRef = "701fc4c"

// TestLegacyNodeSimulatorBuilds builds the legacy node simulator
// (bench/fleetsim/legacy/nodesim.go.txt) inside an export of legacyRef with
// this package's files, as make bench does: a change to this package that
// breaks it would otherwise surface only in a benchmark run.
func TestLegacyNodeSimulatorBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an old tree of heatsink")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command(git, "-C", root, "cat-file", "-e", legacyRef+"^{commit}").Run(); err != nil {
		t.Skipf("%s is not in this clone's history (shallow?)", legacyRef)
	}
	tree := t.TempDir()
	archive := exec.Command(git, "-C", root, "archive", legacyRef)
	untar := exec.Command("tar", "-x", "-C", tree)
	var errs bytes.Buffer
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
	dst := filepath.Join(tree, "cmd", "nodesim")
	copyFile(t, filepath.Join(root, "bench", "fleetsim", "legacy", "nodesim.go.txt"), filepath.Join(dst, "main.go"))
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			copyFile(t, f, filepath.Join(dst, "simproto", f))
		}
	}
	build := exec.Command("go", "build", "-o", os.DevNull, "./cmd/nodesim")
	build.Dir = tree
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the legacy node simulator does not build against this simproto: %v\n%s", err, out)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
