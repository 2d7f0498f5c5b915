package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procStat is what /proc/<pid>/stat says of a process.
type procStat struct {
	comm       string
	ppid       int
	cpuSeconds float64 // user + system
	// childCPUSeconds is the user + system time of its children that
	// exited and were waited for (cutime + cstime).
	childCPUSeconds float64
}

// parseStat reads a /proc/<pid>/stat line. The command name is in
// parentheses and may itself hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseStat(line string) (procStat, error) {
	open, close := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || close < open {
		return procStat{}, errors.New("stat: no (comm)")
	}
	f := strings.Fields(line[close+1:])
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("stat: %d fields after comm, want at least 13", len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseUint(f[11], 10, 64)
	st, err3 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procStat{}, fmt.Errorf("stat: %w", err)
	}
	ps := procStat{comm: line[open+1 : close], ppid: ppid, cpuSeconds: float64(ut+st) / clockTicks}
	if len(f) >= 15 { // cutime and cstime, fields 16 and 17
		cut, err1 := strconv.ParseInt(f[13], 10, 64)
		cst, err2 := strconv.ParseInt(f[14], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return procStat{}, fmt.Errorf("stat: %w", err)
		}
		ps.childCPUSeconds = float64(cut+cst) / clockTicks
	}
	return ps, nil
}

// memStatus is the memory of /proc/<pid>/status, in bytes.
type memStatus struct{ rss, peak int64 }

// parseStatus reads VmRSS and VmHWM (the peak resident set) of a
// /proc/<pid>/status.
func parseStatus(text string) (memStatus, error) {
	var m memStatus
	var seen int
	for line := range strings.SplitSeq(text, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return memStatus{}, fmt.Errorf("status: %s: %q", name, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return memStatus{}, fmt.Errorf("status: %s: %w", name, err)
		}
		if name == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.peak = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return memStatus{}, errors.New("status: VmRSS or VmHWM missing (a zombie?)")
	}
	return m, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

func readStatus(pid int) (memStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	return parseStatus(string(b))
}

// descendants lists the live descendants of pid (a node simulator may run
// part of its simulation in child processes of its own).
func descendants(pid int) []int {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if st, err := readStat(p); err == nil {
			kids[st.ppid] = append(kids[st.ppid], p)
		}
	}
	var out []int
	for queue := kids[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, kids[queue[0]]...)
	}
	return out
}

// treeCPU is the CPU seconds of pid and all its descendants, live or
// exited and waited for.
func treeCPU(pid int) (float64, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	sum := st.cpuSeconds + st.childCPUSeconds
	for _, d := range descendants(pid) {
		if ds, err := readStat(d); err == nil {
			sum += ds.cpuSeconds + ds.childCPUSeconds
		}
	}
	return sum, nil
}

// treeStatus is the memory of pid and its live descendants, summed (the
// peak is the sum of their peaks: an upper bound).
func treeStatus(pid int) (memStatus, error) {
	m, err := readStatus(pid)
	if err != nil {
		return m, err
	}
	for _, d := range descendants(pid) {
		if dm, err := readStatus(d); err == nil {
			m.rss += dm.rss
			m.peak += dm.peak
		}
	}
	return m, nil
}

// childrenNamed finds this process's children called name (the control
// plane harness starts etcd and kube-apiserver as child processes without
// telling their PIDs).
func childrenNamed(name string) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil { // gone meanwhile
			continue
		}
		if st.ppid == self && st.comm == name {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
