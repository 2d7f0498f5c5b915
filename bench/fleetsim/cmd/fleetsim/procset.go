package main

import "sync"

// a process replaced by a restart keeps its CPU time in base.
type procSet struct {
	mu    sync.Mutex
	procs map[string]*procEntry
	stats map[string]*ProcStats
	last  map[string]float64 // CPU seconds at the last phase mark
}

type procEntry struct {
	pid  int
	base float64 // CPU seconds of the earlier processes of this name
	// tree: measure the process with its descendants (the fleet design's
	// node simulator runs its routing followers in a child process).
	tree bool
}

func newProcSet() *procSet {
	return &procSet{procs: map[string]*procEntry{}, stats: map[string]*ProcStats{}, last: map[string]float64{}}
}

func (p *procSet) add(name string, pid int) { p.addEntry(name, &procEntry{pid: pid}) }

// addTree measures pid with its descendants.
func (p *procSet) addTree(name string, pid int) { p.addEntry(name, &procEntry{pid: pid, tree: true}) }

func (p *procSet) addEntry(name string, e *procEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs[name] = e
	pid := e.pid
	p.stats[name] = &ProcStats{PID: pid, CPU: map[string]float64{}}
}

// replaced moves the CPU time of an exited child into its name's base.
func (p *procSet) replaced(name string, c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.procs[name]; e != nil && e.pid == c.pid() {
		e.base += c.cpuSeconds()
		e.pid = 0
	}
}

// setPID is the new process of a name.
func (p *procSet) setPID(name string, pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.procs[name]; e != nil {
		e.pid = pid
		p.stats[name].PID = pid
	}
}

// cpuLocked is a name's CPU seconds, all its processes together; ok is
// false when the current one cannot be read.
func (p *procSet) cpuLocked(name string) (float64, bool) {
	e := p.procs[name]
	if e.pid == 0 {
		return e.base, true
	}
	if e.tree {
		cpu, err := treeCPU(e.pid)
		return e.base + cpu, err == nil
	}
	st, err := readStat(e.pid)
	if err != nil {
		return 0, false
	}
	return e.base + st.cpuSeconds, true
}

// mark closes phase (if not empty) at the current CPU times.
func (p *procSet) mark(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.procs {
		cpu, ok := p.cpuLocked(name)
		if !ok {
			continue
		}
		ps := p.stats[name]
		if phase != "" {
			ps.CPU[phase] = cpu - p.last[name]
			ps.CPUPhases += ps.CPU[phase]
		}
		p.last[name] = cpu
	}
	p.sampleLocked()
}

// sample records each live process's peak RSS and CPU time and returns the
// sum of their resident sets now.
func (p *procSet) sample() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sampleLocked()
}

func (p *procSet) sampleLocked() int64 {
	var sum int64
	for name, e := range p.procs {
		ps := p.stats[name]
		if cpu, ok := p.cpuLocked(name); ok {
			ps.CPUTotal = cpu
		}
		if e.pid == 0 {
			continue
		}
		read := readStatus
		if e.tree {
			read = treeStatus
		}
		m, err := read(e.pid)
		if err != nil {
			continue
		}
		sum += m.rss
		ps.PeakRSSMB = max(ps.PeakRSSMB, float64(m.peak)/(1<<20))
	}
	return sum
}

// exited records the CPU time of a child that exited on its own.
func (p *procSet) exited(name string, c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.procs[name]; e != nil && c.exited() && e.pid == c.pid() {
		p.stats[name].CPUTotal = e.base + c.cpuSeconds()
	}
}

func (p *procSet) snapshot() map[string]*ProcStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// runOne runs one design at one fleet size. It always returns a result; what
// went wrong is in its Reached and Notes.
