// Package routing defines the routing table: the list of mitigated keys the
// manager publishes and every sidecar and in-process client obeys. It is the
// contract between the control plane and the data path, so it is versioned
// and both sides use these types.
//
// The table is published as JSON under key "routing.json" of the ConfigMap
// "<policy>-routing" in the policy's namespace, and pushed to the node
// agents; for a policy whose key names are hidden the ConfigMap holds only
// a view (ViewSchemaVersion) and the agents' push is the one raw table.
package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SchemaVersion is the version of the JSON layout. A reader refuses a table
// with a greater version (and keeps its last good one) rather than guessing.
//
// Version 2 added Database. A field a reader may safely ignore keeps the
// version (see LocalCache); Database may not be ignored, since a reader
// that did would apply a table for database 2 to database 0. So a writer
// stamps a table with SchemaVersionFor: 1 while the table governs database
// 0 (what every version-1 reader assumes, so they go on reading it during
// an upgrade), 2 otherwise, which version-1 readers refuse.
const SchemaVersion = 2

// SchemaVersionFor is the oldest schema version that can carry a table for
// database: what a writer stamps its table with.
func SchemaVersionFor(database int32) int {
	if database != 0 {
		return 2
	}
	return 1
}

// ViewSchemaVersion stamps a table whose keys are shown as hashes (the
// routing ConfigMap of a policy whose spec.keyNames is not Plain holds only
// such a view; its readers get the raw table from their node agent). No
// reader can match its keys, so none must apply it: every reader, of any
// version, refuses a schema version greater than its own and keeps the
// table it has (or, starting, keeps waiting for its node agent).
const ViewSchemaVersion = 1000

// MaxDatabase is the greatest database index a table may name: Redis has 16
// databases (0 to 15) unless configured otherwise.
const MaxDatabase = 15

// ConfigMapKey is the ConfigMap data key holding the JSON table.
const ConfigMapKey = "routing.json"

// ConfigMapName is the name of the routing ConfigMap of a policy.
func ConfigMapName(policy string) string { return policy + "-routing" }

// Source says why a key is in the table.
type Source string

const (
	// SourceDetected keys were measured over a threshold.
	SourceDetected Source = "detected"
	// SourceScheduled keys were named by a schedule.
	SourceScheduled Source = "scheduled"
)

// Table is one published routing table.
type Table struct {
	// SchemaVersion is SchemaVersion of the writer.
	SchemaVersion int `json:"schemaVersion"`
	// Policy is "<namespace>/<name>" of the policy that published it.
	Policy string `json:"policy"`
	// Version grows by one at each publication that changes the entries.
	Version int64 `json:"version"`
	// Database is the logical database (SELECT index) the table governs:
	// readers apply it only to commands sent in that database, and pass
	// every other database's commands through untouched. Absent means 0,
	// so a table for database 0 has the same bytes as before the field
	// existed. Needs schemaVersion 2 when not 0 (SchemaVersionFor).
	Database int32 `json:"database,omitempty"`
	// EpochMillis is the split epoch length; epoch n covers wall-clock Unix
	// milliseconds [n*EpochMillis, (n+1)*EpochMillis).
	EpochMillis int64 `json:"epochMillis"`
	// Entries are the mitigated keys, sorted by Key, at most one per key.
	Entries []Entry `json:"entries"`
	// LocalCache holds the policy's settings for the local cache of every
	// reader (sidecar or in-process hook), absent when the policy leaves
	// them to the reader's defaults. Optional: a reader that predates it
	// ignores it (JSON decoding skips unknown fields), which keeps the
	// schema version at 1.
	LocalCache *CacheSettings `json:"localCache,omitempty"`
	// Replicas holds the policy's settings for replica reads, absent when
	// the policy does not allow them. Optional, like LocalCache: a reader
	// that ignores it reads every key from its master, which is exact.
	Replicas *ReplicaSettings `json:"replicas,omitempty"`
}

// ReplicaSettings are the table-wide settings of replica reads (the
// policy's spec.mitigations.replicaReads).
type ReplicaSettings struct {
	// Addresses are a standalone master's replicas (host:port); empty for
	// a Redis Cluster or a Sentinel set, whose replicas readers discover.
	Addresses []string `json:"addresses,omitempty"`
	// CheckMillis is how often a reader measures its replicas' lag.
	CheckMillis int64 `json:"checkMillis"`
}

// CacheSettings are the table-wide settings of the readers' local caches
// (the policy's spec.mitigations.localCache).
type CacheSettings struct {
	// Tracking turns on server-assisted invalidation (CLIENT TRACKING) for
	// cached keys: a write made anywhere drops the cached value within a
	// network delay instead of at the end of its TTL.
	Tracking bool `json:"tracking,omitempty"`
	// MaxEntries and MaxBytes bound each reader's cache (0: the reader's
	// own default).
	MaxEntries int64 `json:"maxEntries,omitempty"`
	MaxBytes   int64 `json:"maxBytes,omitempty"`
}

// Entry says how to treat one logical key. Several mitigations may be set
// at once (a key hot for reads and writes gets both).
type Entry struct {
	// Key is the logical key.
	Key string `json:"key"`
	// Source says why the key is here.
	Source Source `json:"source"`
	// NotBefore and NotAfter bound when the entry applies (scheduled events);
	// zero means unbounded. A reader outside the bounds treats the key as
	// unmitigated for reads and writes except that split reads still sum
	// every listed epoch.
	NotBefore *time.Time `json:"notBefore,omitempty"`
	NotAfter  *time.Time `json:"notAfter,omitempty"`

	// Coalesce merges concurrent reads of the key into one upstream read.
	Coalesce bool `json:"coalesce,omitempty"`
	// LocalCache serves reads from the process's memory.
	LocalCache *LocalCache `json:"localCache,omitempty"`
	// ReplicaReads sends the key's reads to the replicas of its shard.
	ReplicaReads *ReplicaReads `json:"replicaReads,omitempty"`
	// Replicate stores the value in several physical keys.
	Replicate *Replicate `json:"replicate,omitempty"`
	// Split stores the counter in shards.
	Split *Split `json:"split,omitempty"`
	// PreAggregate sums increments locally before writing them to a shard.
	PreAggregate *PreAggregate `json:"preAggregate,omitempty"`
	// Shed refuses the key's commands over a cluster-wide budget. A reader
	// that predates it ignores it (and sheds nothing), so it keeps the
	// schema version.
	Shed *Shed `json:"shed,omitempty"`
}

// Shed is a key's cluster-wide budget and the demand it is shared by. Each
// reader admits a direction's commands at Budget × its own demand ÷ Demand
// (its share: what it wants of what everyone wants), as a local token
// bucket, and answers the rest at once with ShedError. A reader whose own
// demand is not measured yet (new, restarted, or the key just entered the
// table) admits MinPerSecond until it is. A direction with a zero budget is
// never shed, and neither are the reads of a key with a local cache (a hit
// costs Redis nothing, a miss is one coalesced read per TTL).
type Shed struct {
	// ReadsPerSecond and WritesPerSecond are the budgets, summed over
	// every reader.
	ReadsPerSecond  int64 `json:"readsPerSecond,omitempty"`
	WritesPerSecond int64 `json:"writesPerSecond,omitempty"`
	// DemandReads and DemandWrites are the cluster-wide rates the clients
	// ask for (admitted and shed alike) as the manager last published
	// them: at least the measured rate, so the shares sum to at most the
	// budget while it holds (see docs/engine.md, Shedding).
	DemandReads  int64 `json:"demandReads,omitempty"`
	DemandWrites int64 `json:"demandWrites,omitempty"`
	// MinPerSecond is what a reader admits per direction before it has
	// measured its own demand.
	MinPerSecond int64 `json:"minPerSecond,omitempty"`
}

// ShedCode is the error code of a shed command's reply (ShedError): a
// code of heatsink's own, which no client library retries.
//
// Not TRYAGAIN (nor LOADING, READONLY, MASTERDOWN, CLUSTERDOWN, NOREPLICAS
// or "max number of clients"): go-redis v9 (Client and, per node,
// ClusterClient) takes the FIRST command's error as a pipeline's and, when
// it is one of those, sends the whole pipeline again (MaxRetries 3,
// MaxRedirects 3 by default: redis.go pipelineReadCmds, osscluster.go
// pipelineReadCmds, error.go shouldRetry), so every admitted command of
// the pipeline is applied up to four times. The sidecar cannot tell a
// plain command from a pipeline's first one (a pipeline may arrive in
// several reads), and go-redis retries the same codes for both, so no code
// is retried for the one and not replayed for the other. redis-py 4.3.4 (Redis: no error retried; RedisCluster and
// its pipeline: TryAgainError retried per command) and ioredis 6 (Redis:
// none; Cluster: TRYAGAIN retried per command, a pipeline only when every
// other command is a read or failed alike) would retry TRYAGAIN safely,
// but one reply serves every client: none retries SHED, so a refused
// command reaches the application at once, as the documented error, and
// an admitted one is applied exactly once (test/clients
// TestShedPipelineAppliesEachWriteOnce).
const ShedCode = "SHED"

// ShedError is the error reply of a shed command.
const ShedError = ShedCode + " heatsink: key over its shed budget, retry later"

// LocalCache parameters.
type LocalCache struct {
	// TTLMillis is how long a cached value is served.
	TTLMillis int64 `json:"ttlMillis"`
	// JitterPercent shortens an entry's TTL by a random up to this
	// percent (a fill timed by the expiry of the key's previous entry
	// lives the whole TTL).
	JitterPercent int32 `json:"jitterPercent,omitempty"`
	// RefreshAheadPercent: a read in a cached value's refresh window
	// starts one background refresh, so a key that stays read never expires
	// under its readers. The engine measures each key's window (about the
	// 90th percentile of what its refreshes need); this percent of the
	// value's lifetime is its ceiling. 0 (or absent, as from an older
	// writer) turns it off.
	RefreshAheadPercent int32 `json:"refreshAheadPercent,omitempty"`
}

// ReplicaReads parameters.
type ReplicaReads struct {
	// MaxLagMillis is the replication lag past which a replica is skipped.
	MaxLagMillis int64 `json:"maxLagMillis"`
}

// Replicate parameters.
type Replicate struct {
	// Replicas is the number of replica physical keys (besides the base key).
	Replicas int32 `json:"replicas"`
	// TTLMillis is the TTL each replica is written with.
	TTLMillis int64 `json:"ttlMillis"`
}

// Split lists the shard layouts ("generations") of a split counter. Each
// generation starts at an epoch; the one with the greatest FromEpoch not after
// the current epoch takes writes; every listed generation is summed by reads,
// because the older ones may hold increments not yet folded back into the
// base key.
type Split struct {
	// Generations sorted by FromEpoch ascending, at least one.
	Generations []Generation `json:"generations"`
	// Members: the key is a hash of counters split by field, not a string
	// counter: a field's HINCRBY goes to shard MemberShard(field, n) of
	// the write generation, and a field's value is the sum of its places
	// (the base key and that field's shard in every listed generation).
	// A reader that predates it treats the key as a split string counter
	// and refuses the hash commands: nothing is written wrong, and the
	// manager withdraws a move its clients' commands are refused under.
	Members bool `json:"members,omitempty"`
	// Kind is the type a member split spreads: "" a hash of counters (by
	// field), "zset" a sorted set (by member: a member's score is the sum
	// of its places), "set" a set (by member: a member is in the set when
	// some place holds it). A reader that predates it treats every member
	// split as a hash and refuses the sorted-set and set commands: nothing
	// is written wrong, and the manager withdraws the move.
	Kind MemberKind `json:"kind,omitempty"`
}

// MemberKind is the type a member split spreads (Split.Kind).
type MemberKind string

const (
	KindHash MemberKind = ""
	KindZSet MemberKind = "zset"
	KindSet  MemberKind = "set"
)

// Generation is one shard layout.
type Generation struct {
	// FromEpoch is the first epoch in which writes go to this generation.
	FromEpoch int64 `json:"fromEpoch"`
	// Shards is the number of physical shards; 0 means writes go to the base
	// key (the counter is being unsplit).
	Shards int32 `json:"shards"`
}

// PreAggregate parameters.
type PreAggregate struct {
	// FlushMillis is how often summed increments are written.
	FlushMillis int64 `json:"flushMillis"`
}

// MaxTableBytes bounds a published table: a ConfigMap holds at most 1 MiB,
// so no larger table can be published, and a reader refuses one.
const MaxTableBytes = 1 << 20

// Parse decodes and validates a published table.
func Parse(data []byte) (*Table, error) {
	if len(data) > MaxTableBytes {
		return nil, fmt.Errorf("routing table: %d bytes, more than %d", len(data), MaxTableBytes)
	}
	var t Table
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("routing table: %w", err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Marshal encodes a table after validating it.
func (t *Table) Marshal() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// Validate checks the invariants readers rely on.
func (t *Table) Validate() error {
	if t.SchemaVersion < 1 || t.SchemaVersion > SchemaVersion {
		return fmt.Errorf("routing table: schemaVersion %d not supported (want 1..%d)", t.SchemaVersion, SchemaVersion)
	}
	if t.EpochMillis <= 0 {
		return errors.New("routing table: epochMillis must be positive")
	}
	if t.Database < 0 || t.Database > MaxDatabase {
		return fmt.Errorf("routing table: database %d out of range (want 0..%d)", t.Database, MaxDatabase)
	}
	if t.SchemaVersion < SchemaVersionFor(t.Database) {
		// A version-1 reader would have ignored the field: such a table
		// was not written by a writer that knew what it meant.
		return fmt.Errorf("routing table: database %d needs schemaVersion %d, not %d", t.Database, SchemaVersionFor(t.Database), t.SchemaVersion)
	}
	if c := t.LocalCache; c != nil && (c.MaxEntries < 0 || c.MaxBytes < 0) {
		return errors.New("routing table: localCache.maxEntries and maxBytes must not be negative")
	}
	if r := t.Replicas; r != nil && r.CheckMillis <= 0 {
		return errors.New("routing table: replicas.checkMillis must be positive")
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.ReplicaReads != nil && e.ReplicaReads.MaxLagMillis <= 0 {
			return fmt.Errorf("routing table: %q: replicaReads.maxLagMillis must be positive", e.Key)
		}
		if e.Key == "" {
			return fmt.Errorf("routing table: entry %d has an empty key", i)
		}
		if i > 0 && t.Entries[i-1].Key >= e.Key {
			return fmt.Errorf("routing table: entries not sorted or duplicated at %q", e.Key)
		}
		if e.LocalCache != nil && e.LocalCache.TTLMillis <= 0 {
			return fmt.Errorf("routing table: %q: localCache.ttlMillis must be positive", e.Key)
		}
		if e.LocalCache != nil && (e.LocalCache.RefreshAheadPercent < 0 || e.LocalCache.RefreshAheadPercent > 90) {
			return fmt.Errorf("routing table: %q: localCache.refreshAheadPercent must be 0 to 90", e.Key)
		}
		if e.Replicate != nil && (e.Replicate.Replicas < 1 || e.Replicate.TTLMillis <= 0) {
			return fmt.Errorf("routing table: %q: replicate needs replicas >= 1 and ttlMillis > 0", e.Key)
		}
		if e.Split != nil {
			g := e.Split.Generations
			if len(g) == 0 {
				return fmt.Errorf("routing table: %q: split has no generations", e.Key)
			}
			for j := range g {
				if g[j].Shards < 0 || g[j].Shards == 1 {
					return fmt.Errorf("routing table: %q: split generation %d has %d shards (want 0 or >= 2)", e.Key, g[j].FromEpoch, g[j].Shards)
				}
				if j > 0 && g[j-1].FromEpoch >= g[j].FromEpoch {
					return fmt.Errorf("routing table: %q: split generations not sorted by fromEpoch", e.Key)
				}
			}
		}
		if sh := e.Shed; sh != nil && (sh.ReadsPerSecond < 0 || sh.WritesPerSecond < 0 || sh.DemandReads < 0 || sh.DemandWrites < 0 || sh.MinPerSecond < 0) {
			return fmt.Errorf("routing table: %q: shed rates must not be negative", e.Key)
		}
		if e.PreAggregate != nil && (e.PreAggregate.FlushMillis <= 0 || e.Split == nil) {
			return fmt.Errorf("routing table: %q: preAggregate needs flushMillis > 0 and a split", e.Key)
		}
		if e.Split != nil && e.Split.Kind != KindHash && !e.Split.Members {
			return fmt.Errorf("routing table: %q: a split's kind is that of a member split", e.Key)
		}
		if e.PreAggregate != nil && e.Split.Members {
			return fmt.Errorf("routing table: %q: preAggregate sums string increments; a member split takes none", e.Key)
		}
	}
	return nil
}

// Lookup returns the entry of key, or nil. Entries are sorted, so this is a
// binary search; callers on the hot path should build an index (see Index).
func (t *Table) Lookup(key string) *Entry {
	lo, hi := 0, len(t.Entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.Entries[m].Key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(t.Entries) && t.Entries[lo].Key == key {
		return &t.Entries[lo]
	}
	return nil
}

// Active reports whether the entry applies at now (inside NotBefore/NotAfter).
func (e *Entry) Active(now time.Time) bool {
	if e.NotBefore != nil && now.Before(*e.NotBefore) {
		return false
	}
	if e.NotAfter != nil && !now.Before(*e.NotAfter) {
		return false
	}
	return true
}

// EpochAt is the epoch number containing now.
func (t *Table) EpochAt(now time.Time) int64 {
	return EpochAt(now, t.EpochMillis)
}

// EpochAt is the epoch number containing now for epochs of epochMillis.
func EpochAt(now time.Time, epochMillis int64) int64 {
	ms := now.UnixMilli()
	e := ms / epochMillis
	if ms < 0 && ms%epochMillis != 0 {
		e--
	}
	return e
}

// EpochStart is the wall-clock start of epoch n.
func EpochStart(n, epochMillis int64) time.Time {
	return time.UnixMilli(n * epochMillis).UTC()
}

// WriteGeneration is the generation that takes writes in epoch, or nil when
// every generation starts later (writes then go to the base key).
func (s *Split) WriteGeneration(epoch int64) *Generation {
	var g *Generation
	for i := range s.Generations {
		if s.Generations[i].FromEpoch <= epoch {
			g = &s.Generations[i]
		}
	}
	return g
}
