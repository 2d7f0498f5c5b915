package cpulimit

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestGroupHoldsAProcess: a busy loop in a group of a tenth of a core uses
// at most a tenth of the wall time it ran, plus one period's quota (the
// kernel's enforcement, not this machine's speed); the group is gone after
// Remove.
func TestGroupHoldsAProcess(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	g, err := New(fmt.Sprintf("heatsink-cpulimit-test-%d", os.Getpid()), 0.1)
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = g.Remove()
		}
	})
	cmd := exec.Command("sh", "-c", "read _; end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	start := time.Now()
	stdin.Close() // the loop starts only once the shell is in the group
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	t.Logf("busy loop: %v of CPU in %v", cpu, wall)
	if limit := wall/10 + 20*time.Millisecond; cpu > limit {
		t.Errorf("the loop used %v of CPU in %v: over a tenth of a core (%v)", cpu, wall, limit)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	removed = true
	if _, err := os.Stat(g.dir); !os.IsNotExist(err) {
		t.Errorf("group %s still there: %v", g.dir, err)
	}
}
