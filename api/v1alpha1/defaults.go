package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Default values of HotKeyPolicySpec. They match the +kubebuilder:default
// markers of the schema, which is where defaults are applied: the API server
// stores every policy with them. SetDefaults exists so that code holding a
// policy that did not pass through the API server (unit tests, the demo)
// sees the same values; webhook's TestAdmission ("admits a minimal policy
// with every default applied") keeps the two in step.
const (
	DefaultWindow            = 10 * time.Second
	DefaultTopK              = 64
	DefaultReportInterval    = time.Second
	DefaultSustainFor        = 2 * time.Second
	DefaultCooldown          = 5 * time.Minute
	DefaultHysteresisPercent = 20
	DefaultHeadroomPercent   = 25
	DefaultMaxMitigatedKeys  = 200
	DefaultCacheTTL          = 2 * time.Second
	DefaultJitterPercent     = 10
	DefaultRefreshAhead      = 10
	DefaultMaxEntries        = 10000
	DefaultMaxBytes          = 64 << 20
	DefaultMaxReplicas       = 8
	DefaultReplicaTTL        = 5 * time.Minute
	DefaultMaxShards         = 64
	DefaultEpoch             = 60 * time.Second
	DefaultFlushInterval     = 100 * time.Millisecond
	DefaultLeadTime          = 5 * time.Minute
	DefaultMaxReplicaLag     = time.Second
	DefaultLagCheckInterval  = time.Second
	DefaultShedBudgetPercent = 80
	DefaultShedMinPerSecond  = 10
	DefaultValueBytes        = 1 << 20
)

// SetDefaults fills every unset field of spec with its default, as the schema
// would.
func SetDefaults(spec *HotKeyPolicySpec) {
	if spec.Mode == "" {
		spec.Mode = ModeObserve
	}
	if spec.KeyNames == "" {
		spec.KeyNames = KeyNamesPlain
	}
	if len(spec.Keys.Include) == 0 {
		spec.Keys.Include = []string{"*"}
	}
	d := &spec.Detection
	dur(&d.Window, DefaultWindow)
	i32(&d.TopK, DefaultTopK)
	dur(&d.ReportInterval, DefaultReportInterval)
	th := &spec.Thresholds
	// readsPerSecond and writesPerSecond have no default: unset means "not
	// typed" (see Thresholds.InForce).
	if a := th.Auto; a != nil {
		i32(&a.TargetUtilizationPercent, DefaultTargetUtilizationPercent)
		i32(&a.KeySharePercent, DefaultKeySharePercent)
	}
	dur(&th.SustainFor, DefaultSustainFor)
	dur(&th.Cooldown, DefaultCooldown)
	i64(&th.ValueBytes, DefaultValueBytes)
	// hysteresisPercent 0 is a legal explicit value; the schema defaults it.
	c := &spec.Capacity
	// perShard*PerSecond have no default either (see PerKeyCapacity).
	i32(&c.MaxMitigatedKeys, DefaultMaxMitigatedKeys)
	m := &spec.Mitigations
	boolean(&m.Coalesce.Enabled, true)
	boolean(&m.LocalCache.Enabled, true)
	boolean(&m.Replicate.Enabled, false)
	boolean(&m.Split.Enabled, false)
	boolean(&m.PreAggregate.Enabled, false)
	boolean(&m.ReplicaReads.Enabled, false)
	dur(&m.ReplicaReads.MaxLag, DefaultMaxReplicaLag)
	dur(&m.ReplicaReads.LagCheckInterval, DefaultLagCheckInterval)
	dur(&m.LocalCache.TTL, DefaultCacheTTL)
	i32(&m.LocalCache.MaxEntries, DefaultMaxEntries)
	i64(&m.LocalCache.MaxBytes, DefaultMaxBytes)
	if m.LocalCache.RefreshAheadPercent == nil {
		v := int32(DefaultRefreshAhead)
		m.LocalCache.RefreshAheadPercent = &v
	}
	i32(&m.Replicate.MaxReplicas, DefaultMaxReplicas)
	dur(&m.Replicate.ReplicaTTL, DefaultReplicaTTL)
	i32(&m.Split.MaxShards, DefaultMaxShards)
	dur(&m.Split.Epoch, DefaultEpoch)
	dur(&m.PreAggregate.FlushInterval, DefaultFlushInterval)
	boolean(&m.Shed.Enabled, false)
	i32(&m.Shed.BudgetPercent, DefaultShedBudgetPercent)
	boolean(&m.Shed.Reads, true)
	if m.Shed.MinPerSecond == nil {
		v := int64(DefaultShedMinPerSecond)
		m.Shed.MinPerSecond = &v
	}
	for i := range spec.Schedules {
		dur(&spec.Schedules[i].LeadTime, DefaultLeadTime)
	}
}

func dur(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

func boolean(p **bool, v bool) {
	if *p == nil {
		*p = &v
	}
}

func i32(p *int32, v int32) {
	if *p == 0 {
		*p = v
	}
}

func i64(p *int64, v int64) {
	if *p == 0 {
		*p = v
	}
}

// The enabled switches are pointers so that a client which does not mention
// a mitigation gets the schema default instead of an explicit false. These
// accessors apply the same defaults to a nil switch.

// IsEnabled reports whether coalescing is allowed (default true).
func (c Coalesce) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// IsEnabled reports whether local caching is allowed (default true).
func (c LocalCache) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// RefreshAhead is refreshAheadPercent (default 10; 0: off).
func (c LocalCache) RefreshAhead() int32 {
	if c.RefreshAheadPercent == nil {
		return DefaultRefreshAhead
	}
	return *c.RefreshAheadPercent
}

// IsEnabled reports whether replication is allowed (default false).
func (c Replicate) IsEnabled() bool { return c.Enabled != nil && *c.Enabled }

// IsEnabled reports whether splitting is allowed (default false).
func (c Split) IsEnabled() bool { return c.Enabled != nil && *c.Enabled }

// IsEnabled reports whether pre-aggregation is allowed (default false).
func (c PreAggregate) IsEnabled() bool { return c.Enabled != nil && *c.Enabled }

// IsEnabled reports whether replica reads are allowed (default false).
func (c ReplicaReads) IsEnabled() bool { return c.Enabled != nil && *c.Enabled }

// IsEnabled reports whether shedding is allowed (default false).
func (c Shed) IsEnabled() bool { return c.Enabled != nil && *c.Enabled }

// ShedsReads reports whether the reads of an uncached key may be shed
// (default true).
func (c Shed) ShedsReads() bool { return c.Reads == nil || *c.Reads }

// Min is minPerSecond (default 10).
func (c Shed) Min() int64 {
	if c.MinPerSecond == nil {
		return DefaultShedMinPerSecond
	}
	return *c.MinPerSecond
}
