// Package cpulimit holds processes to a fraction of a core with a CPU
// cgroup, as a pod's resources.limits.cpu holds a container: tests and the
// demo use it to make a real redis-server a small shard. It needs root and
// a cgroup file system with the cpu controller (cgroup v1's cpu hierarchy,
// or cgroup v2 with cpu enabled for the caller's cgroup's children); it
// never enables a controller or changes any existing cgroup, and Remove
// deletes the group it made.
package cpulimit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// period is the CFS period: quotas are set per 100 ms, the kernel's and
// Kubernetes' default.
const period = 100_000 // µs

// Group is one CPU cgroup made by New.
type Group struct {
	dir string
	v2  bool
}

// New makes a cgroup named name (a fresh one: it must not exist) under the
// caller's own cgroup, limited to cores of CPU (e.g. 0.1).
func New(name string, cores float64) (*Group, error) {
	if !(cores > 0) || cores > 64 {
		return nil, fmt.Errorf("cpulimit: %v cores is not a limit", cores)
	}
	parent, v2, err := parentDir()
	if err != nil {
		return nil, err
	}
	g := &Group{dir: filepath.Join(parent, name), v2: v2}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("cpulimit: %w", err)
	}
	quota := int(cores * period)
	if v2 {
		err = os.WriteFile(filepath.Join(g.dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0)
	} else {
		err = os.WriteFile(filepath.Join(g.dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0)
		if err == nil {
			err = os.WriteFile(filepath.Join(g.dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0)
		}
	}
	if err != nil {
		_ = os.Remove(g.dir)
		return nil, fmt.Errorf("cpulimit: setting the quota: %w", err)
	}
	return g, nil
}

// Add moves process pid (all its threads) into the group.
func (g *Group) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("cpulimit: adding %d: %w", pid, err)
	}
	return nil
}

// Remove moves any process still in the group back to the parent and
// deletes the group.
func (g *Group) Remove() error {
	b, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	for _, p := range strings.Fields(string(b)) {
		_ = os.WriteFile(filepath.Join(filepath.Dir(g.dir), "cgroup.procs"), []byte(p), 0)
	}
	if err := os.Remove(g.dir); err != nil {
		return fmt.Errorf("cpulimit: %w", err)
	}
	return nil
}

// Available says why New cannot work here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("cpulimit: needs root (a CPU cgroup)")
	}
	_, _, err := parentDir()
	return err
}

// parentDir is the caller's own cgroup directory in a hierarchy with the
// cpu controller: cgroup v1's cpu hierarchy first, else cgroup v2 when cpu
// is enabled for its children.
func parentDir() (dir string, v2 bool, err error) {
	own, err := ownCgroups()
	if err != nil {
		return "", false, err
	}
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, fmt.Errorf("cpulimit: %w", err)
	}
	defer mounts.Close()
	var v2dir string
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(f) {
			continue
		}
		fstype, mountpoint := f[sep+1], f[4]
		switch fstype {
		case "cgroup":
			if sep+3 < len(f) && slices.Contains(strings.Split(f[sep+3], ","), "cpu") {
				return filepath.Join(mountpoint, own["cpu"]), false, nil
			}
		case "cgroup2":
			if p, ok := own[""]; ok {
				v2dir = filepath.Join(mountpoint, p)
			}
		}
	}
	if v2dir != "" {
		b, err := os.ReadFile(filepath.Join(v2dir, "cgroup.subtree_control"))
		if err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
			return v2dir, true, nil
		}
	}
	return "", false, errors.New("cpulimit: no cgroup hierarchy with the cpu controller available to this process")
}

// ownCgroups maps each controller of /proc/self/cgroup (and "" for cgroup
// v2) to the caller's path in it.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cpulimit: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}
