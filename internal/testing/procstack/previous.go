package procstack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heatsink-dev/heatsink/internal/release"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

// Previous is the previous release's `heatsink` binary (release.yaml's
// previous.commit) and its release.
type Previous struct {
	Bin     string
	Version string // release.yaml's previous.version
	Commit  string
}

// PreviousRelease builds the previous release's binary from its commit, as
// hack/bench.d/50-fleet.sh builds its legacy peer and hack/e2e.sh the
// previous image: a detached git worktree of the commit in a temporary
// directory, `go build ./cmd/heatsink` there (the Go build cache shares
// every unchanged package with this tree's builds), the worktree removed.
// The binary is kept in bin/previous/<commit>/heatsink of this tree, so a
// rerun (and CI's second test pass) reuses it; a file lock keeps parallel
// test binaries from building it twice. A clone without the commit (a
// shallow one) fetches it from origin first.
func PreviousRelease(t testing.TB) Previous {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := release.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	p := Previous{Version: rel.Previous.Version, Commit: rel.Previous.Commit}
	dir := filepath.Join(root, "bin", "previous", p.Commit)
	p.Bin = filepath.Join(dir, "heatsink")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(p.Bin); err == nil {
		return p
	}
	if err := buildAt(root, p.Commit, p.Bin); err != nil {
		t.Fatalf("building the previous release (%s, %s): %v", p.Version, p.Commit, err)
	}
	return p
}

func buildAt(root, commit, out string) error {
	git := func(args ...string) error {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	if git("cat-file", "-e", commit+"^{commit}") != nil {
		if err := git("fetch", "--depth=1", "origin", commit); err != nil {
			return fmt.Errorf("the commit is not in this clone, and fetching it failed: %w", err)
		}
	}
	tmp, err := os.MkdirTemp("", "heatsink-previous-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	wt := filepath.Join(tmp, "src")
	if err := git("worktree", "add", "--detach", wt, commit); err != nil {
		return err
	}
	defer func() { _ = git("worktree", "remove", "--force", wt); _ = git("worktree", "prune") }()
	build := exec.Command("go", "build", "-o", out+".tmp", "./cmd/heatsink")
	build.Dir = wt
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v: %s", err, b)
	}
	return os.Rename(out+".tmp", out) // whole or absent, for the next run
}
