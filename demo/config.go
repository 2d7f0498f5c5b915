// Package demo runs all of heatsink on this machine and shows a hot key being
// detected and relieved: a real kube-apiserver and etcd, a 3-master Redis
// Cluster, the manager (reconciler and webhooks), two node agents standing for
// two nodes, four sidecar proxies (two per node) and a workload generator
// whose traffic goes through the proxies. It measures the load on each Redis
// master from Redis itself (INFO), so what it shows is what Redis served.
//
// `heatsink demo` (make demo) runs the long scenario with a live terminal
// view; the e2e test runs a shorter one and asserts on its Result.
package demo

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Config is one demo scenario. Times are offsets from the start of traffic.
type Config struct {
	// Duration is how long traffic runs.
	Duration time.Duration
	// Seed makes the key popularity and the choice of the viral keys
	// reproducible.
	Seed int64

	// BackgroundRate is the Zipf background traffic, ops/s over all proxies
	// (80 % GET, 20 % SET), over BackgroundKeys keys.
	BackgroundRate int
	BackgroundKeys int
	// ViralReadRate is the GET rate of the viral read key from ViralReadAt.
	ViralReadRate int
	ViralReadAt   time.Duration
	// ViralWriteRate is the INCR rate of the viral counter from ViralWriteAt.
	ViralWriteRate int
	ViralWriteAt   time.Duration
	// EventRate is the GET rate over the scheduled event's keys during the
	// event; EventStart is when it starts, EventLead how long before it its
	// keys are prepared, EventDuration how long it lasts.
	EventRate     int
	EventStart    time.Duration
	EventLead     time.Duration
	EventDuration time.Duration

	// Policy thresholds and sizing (see the HotKeyPolicy API).
	// With Auto set the policy types no rate: thresholds.auto with Auto's
	// percents, and neither the key thresholds nor capacity.perShard* (so
	// ReadsPerSecond, WritesPerSecond and PerShardWritesPerSecond are not
	// used).
	Auto                    *AutoConfig
	ReadsPerSecond          int64
	WritesPerSecond         int64
	PerShardWritesPerSecond int64
	SustainFor              time.Duration
	Cooldown                time.Duration
	ReportInterval          time.Duration
	Window                  time.Duration
	Epoch                   time.Duration
	// Margin is how far ahead of an epoch boundary the manager announces a
	// split change (see controllers.HotKeyPolicyReconciler.Margin).
	Margin time.Duration

	// Calm runs only the Zipf background: no viral key, no scheduled
	// event. The summary then says what was mitigated (a false alarm: the
	// background has no hot key), how many decision passes the manager
	// made and what it counted (see Calm).
	Calm bool
	// ReplicaReads runs the replica-reads scenario: a cluster with
	// ReplicasPerMaster replicas per master, the Zipf background and the
	// viral read key only, and a policy under which a read-hot key may not
	// be cached (local cache and replicate off: a key that must not be
	// stale for a TTL) but may be read from its shard's replicas
	// (mitigations.replicaReads), each master declared to take half the
	// viral key's rate (capacity.perShardReadsPerSecond) and sustainFor
	// long enough to measure the key unmitigated. The summary gives the
	// GETs per second of each node of the key's shard before and after its
	// routing entry (see ReplicaReadsResult).
	ReplicaReads bool

	// ShardCPU holds every Redis node to this fraction of a core with a
	// CPU cgroup, as a pod's resources.limits.cpu holds a container (0:
	// unlimited): a small shard, one that the demo's rates can hurt on a
	// machine where an unlimited Redis idles. With Auto the policy says so
	// (thresholds.auto.shardCPU). Needs root and a CPU cgroup
	// (internal/testing/cpulimit).
	ShardCPU float64

	// OutDir receives the PNG chart and the log of the components.
	OutDir string
	// Out receives progress, the live view and the summary; nil discards.
	Out io.Writer
	// Live redraws a full-screen view each second (a terminal); otherwise
	// one line per second is printed.
	Live bool
}

// shardCPU is ShardCPU as a quantity (e.g. 50m), nil when unlimited: what
// the policy says and the demo prints.
func (c *Config) shardCPU() *resource.Quantity {
	if c.ShardCPU <= 0 {
		return nil
	}
	return resource.NewMilliQuantity(int64(math.Round(c.ShardCPU*1000)), resource.DecimalSI)
}

// AutoConfig is the demo's thresholds.auto and how fast the manager trusts
// what it learns.
type AutoConfig struct {
	KeySharePercent          int32
	TargetUtilizationPercent int32
	// ConfidenceCPU is the main-thread CPU-seconds of load after which a
	// master's learned capacity is fully trusted (the manager's default is
	// 30; its thresholds apply from half of it). The demo lowers it as it
	// shortens every window: its masters work a few percent of a core for
	// a minute and a half.
	ConfidenceCPU float64
	// SampleEvery is how often the manager reads each master's INFO (its
	// default is 10 s).
	SampleEvery time.Duration
}

// DefaultAuto is `-auto`'s setting: the API's default percents.
func DefaultAuto() *AutoConfig {
	return &AutoConfig{KeySharePercent: 25, TargetUtilizationPercent: 70, ConfidenceCPU: 0.4, SampleEvery: time.Second}
}

// Default is the scenario of `make demo`: about 90 s of traffic.
func Default() Config {
	return Config{
		Duration:       90 * time.Second,
		Seed:           1,
		BackgroundRate: 2000,
		BackgroundKeys: 5000,
		ViralReadRate:  3000,
		ViralReadAt:    15 * time.Second,
		ViralWriteRate: 2000,
		ViralWriteAt:   25 * time.Second,
		EventRate:      1500,
		EventStart:     55 * time.Second,
		EventLead:      20 * time.Second,
		EventDuration:  30 * time.Second,

		ReadsPerSecond:          800,
		WritesPerSecond:         400,
		PerShardWritesPerSecond: 300,
		SustainFor:              time.Second,
		Cooldown:                30 * time.Second,
		ReportInterval:          500 * time.Millisecond,
		Window:                  2 * time.Second,
		Epoch:                   5 * time.Second,
		Margin:                  time.Second,
	}
}

// Short is the scenario of the e2e test: the same story in about 35 s at
// rates two shared cores sustain next to a test run.
func Short() Config {
	c := Default()
	c.Duration = 32 * time.Second
	c.BackgroundRate = 1000
	c.BackgroundKeys = 2000
	c.ViralReadRate = 1500
	c.ViralReadAt = 4 * time.Second
	c.ViralWriteRate = 1000
	c.ViralWriteAt = 6 * time.Second
	c.EventRate = 600
	c.EventStart = 22 * time.Second
	c.EventLead = 12 * time.Second
	c.EventDuration = 20 * time.Second
	c.ReadsPerSecond = 400
	c.WritesPerSecond = 200
	c.PerShardWritesPerSecond = 150
	c.Epoch = 2 * time.Second
	return c
}

// CalmKeys is the calm scenario's key space: issue 26's check of no false
// alarm is a Zipf(1.1) workload over 100,000 keys.
const CalmKeys = 100_000

// SetCalm makes c the calm scenario (see Config.Calm): the background alone,
// over CalmKeys keys, at c's background rate; the thresholds stay as c has
// them (typed, or Auto).
func (c *Config) SetCalm() {
	c.Calm = true
	c.BackgroundKeys = CalmKeys
	c.ViralReadRate, c.ViralWriteRate, c.EventRate = 0, 0, 0
}

// ReplicasPerMaster is how many replicas each master has in the
// replica-reads scenario (as in issue 24's measure: 3 masters, 2 replicas
// each).
const ReplicasPerMaster = 2

// replicaReadsSustain is the replica-reads scenario's sustainFor: whole
// seconds of the viral key read from its master alone before it is routed.
const replicaReadsSustain = 5 * time.Second

// SetReplicaReads makes c the replica-reads scenario (see
// Config.ReplicaReads): no viral counter, no scheduled event.
func (c *Config) SetReplicaReads() {
	c.ReplicaReads = true
	c.ViralWriteRate, c.EventRate = 0, 0
	c.SustainFor = max(c.SustainFor, replicaReadsSustain)
	c.Cooldown = max(c.Cooldown, c.SustainFor)
}

// replicasPerMaster is how many replicas the scenario's masters have.
func (c *Config) replicasPerMaster() int {
	if c.ReplicaReads {
		return ReplicasPerMaster
	}
	return 0
}

// Validate checks that the scenario makes sense before anything starts.
func (c *Config) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (got %d)", name, v))
		}
	}
	pos("background rate", c.BackgroundRate)
	pos("viral read rate", c.ViralReadRate)
	pos("viral write rate", c.ViralWriteRate)
	pos("event rate", c.EventRate)
	if c.Duration < 5*time.Second {
		errs = append(errs, fmt.Errorf("duration must be at least 5s (got %s)", c.Duration))
	}
	if c.BackgroundKeys < 10 {
		errs = append(errs, fmt.Errorf("background keys must be at least 10 (got %d)", c.BackgroundKeys))
	}
	if c.EventLead >= c.EventDuration {
		errs = append(errs, fmt.Errorf("event lead time %s must be shorter than its duration %s (a HotKeyPolicy rule)", c.EventLead, c.EventDuration))
	}
	if c.Margin <= 0 {
		errs = append(errs, fmt.Errorf("margin must be positive (got %s)", c.Margin))
	}
	if c.Epoch < time.Second {
		errs = append(errs, fmt.Errorf("epoch must be at least 1s (got %s)", c.Epoch))
	}
	if a := c.Auto; a != nil {
		if a.KeySharePercent < 1 || a.KeySharePercent > 100 {
			errs = append(errs, fmt.Errorf("key share must be 1 to 100 percent (got %d)", a.KeySharePercent))
		}
		if a.TargetUtilizationPercent < 10 || a.TargetUtilizationPercent > 95 {
			errs = append(errs, fmt.Errorf("target utilisation must be 10 to 95 percent (got %d)", a.TargetUtilizationPercent))
		}
		if a.ConfidenceCPU <= 0 || a.SampleEvery < 100*time.Millisecond {
			errs = append(errs, errors.New("the capacity's confidence CPU must be positive and its sample interval at least 100ms"))
		}
	} else if c.ReadsPerSecond < 1 || c.WritesPerSecond < 1 || c.PerShardWritesPerSecond < 1 {
		errs = append(errs, errors.New("thresholds and per-shard capacity must be at least 1"))
	}
	if c.ShardCPU < 0 || c.ShardCPU > 1 {
		errs = append(errs, fmt.Errorf("shard CPU must be 0 (unlimited) or at most one core (got %v)", c.ShardCPU))
	}
	if c.ReportInterval > c.Window {
		errs = append(errs, fmt.Errorf("report interval %s must not exceed the window %s", c.ReportInterval, c.Window))
	}
	if c.ReplicaReads && c.Calm {
		errs = append(errs, errors.New("the calm and replica-reads scenarios are two runs"))
	}
	if c.ReplicaReads && c.ViralReadRate < 2 {
		errs = append(errs, fmt.Errorf("the replica-reads scenario needs a viral read rate of at least 2 GET/s (got %d)", c.ViralReadRate))
	}
	if c.Cooldown < c.SustainFor {
		errs = append(errs, fmt.Errorf("cooldown %s must be at least sustainFor %s", c.Cooldown, c.SustainFor))
	}
	return errors.Join(errs...)
}
