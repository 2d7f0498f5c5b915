// Package capacity learns each Redis node's capacity in ops/s for the
// command mix it serves, from the server's own numbers: commands processed
// (INFO stats) and main-thread CPU (INFO cpu). Redis executes commands on
// one main thread, so that thread's CPU is what saturates first: a node
// that ran N commands in C main-thread CPU-seconds serves about N ÷ C ops/s
// of the same mix at one full core. The estimator is pure (samples in,
// estimate out); Sampler reads the samples from Redis.
package capacity

import (
	"math"
	"time"
)

// Sample is one reading of a node's cumulative counters.
type Sample struct {
	At time.Time
	// RunID identifies the server process: a new one (restart, a failover
	// to another process at the address) resets the baseline.
	RunID string
	// Commands is total_commands_processed.
	Commands uint64
	// CPU is the main thread's user+sys CPU-seconds
	// (used_cpu_*_main_thread; used_cpu_* where the server lacks them).
	CPU float64
	// CallUsec and Calls are the sums over INFO commandstats of usec and
	// calls: the time spent executing commands, without I/O.
	CallUsec, Calls uint64
}

// Options tune the estimator; zero fields take the defaults.
type Options struct {
	// MinUtilization: an interval whose main thread was busier than this
	// fraction of a core counts toward the estimate. Below it the server's
	// own housekeeping (serverCron, expiry, the INFO itself) dominates and
	// would make commands look dear. Default 0.02.
	MinUtilization float64
	// FullConfidenceCPU is the CPU-seconds of counted load after which the
	// confidence is 1. Default 30 (e.g. 5 % of a core for 10 minutes).
	FullConfidenceCPU float64
	// Memory is how long (in counted load time) the estimate remembers:
	// older intervals weigh e^(-age/Memory), so a changed mix shows within
	// about Memory of load. Default 10 minutes.
	Memory time.Duration
}

func (o Options) withDefaults() Options {
	if o.MinUtilization <= 0 {
		o.MinUtilization = 0.02
	}
	if o.FullConfidenceCPU <= 0 {
		o.FullConfidenceCPU = 30
	}
	if o.Memory <= 0 {
		o.Memory = 10 * time.Minute
	}
	return o
}

// Estimate is what is known about one node.
type Estimate struct {
	// Utilization is the main thread's busy fraction of one core over the
	// last interval (0 before two samples).
	Utilization float64
	// OpsPerSecond is the command rate over the last interval.
	OpsPerSecond float64
	// Capacity is the learned ops/s at one full core for the observed mix
	// (0 while nothing was counted).
	Capacity float64
	// Confidence in [0,1] grows with the counted CPU-seconds (see
	// Options.FullConfidenceCPU).
	Confidence float64
	// UsecPerCall is the mean execution time per command over the counted
	// intervals (INFO commandstats; excludes I/O, so 1e6 ÷ UsecPerCall is
	// an upper bound of Capacity).
	UsecPerCall float64

	// The decayed sums behind Capacity and Confidence.
	ops, cpu, callUsec, calls float64
	last                      Sample
	has                       bool
}

// Observe folds sample s into e and returns the new estimate. Samples out
// of order, from a new process or with counters that went back take a new
// baseline and keep what was learned.
func Observe(e Estimate, s Sample, o Options) Estimate {
	o = o.withDefaults()
	prev, had := e.last, e.has
	e.last, e.has = s, true
	if !had || s.RunID != prev.RunID || !s.At.After(prev.At) || s.Commands < prev.Commands || s.CPU < prev.CPU || s.Calls < prev.Calls || s.CallUsec < prev.CallUsec {
		e.Utilization, e.OpsPerSecond = 0, 0
		return e
	}
	dt := s.At.Sub(prev.At).Seconds()
	dops := float64(s.Commands - prev.Commands)
	dcpu := s.CPU - prev.CPU
	e.Utilization = dcpu / dt
	e.OpsPerSecond = dops / dt
	if e.Utilization < o.MinUtilization || dops == 0 {
		return e
	}
	// Decay by the counted time only: an idle node keeps its estimate.
	k := math.Exp(-dt / o.Memory.Seconds())
	e.ops = e.ops*k + dops
	e.cpu = e.cpu*k + dcpu
	e.calls = e.calls*k + float64(s.Calls-prev.Calls)
	e.callUsec = e.callUsec*k + float64(s.CallUsec-prev.CallUsec)
	e.Capacity = e.ops / e.cpu
	e.Confidence = math.Min(1, e.cpu/o.FullConfidenceCPU)
	if e.calls > 0 {
		e.UsecPerCall = e.callUsec / e.calls
	}
	return e
}
