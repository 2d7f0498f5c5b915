package capacity

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// DefaultInterval is the least time between two samples of one node: one
// INFO (sections server, stats, cpu, commandstats) per node per interval,
// and on a cluster one CLUSTER SLOTS per sample, is the whole cost on Redis.
const DefaultInterval = 10 * time.Second

// Node is one node's estimate, named by its address and role.
type Node struct {
	Addr    string
	Replica bool
	Estimate
}

// Sampler keeps the estimates of one target's nodes. It is safe for
// concurrent use.
type Sampler struct {
	Interval time.Duration
	Options  Options

	mu    sync.Mutex
	nodes map[string]*Node
	due   map[string]time.Time
	// owners is, per hash slot, the address of the master serving it, as
	// the cluster client saw it at the last Sample (nil: not a cluster).
	owners []string
	// slots is the cluster's CLUSTER SLOTS at the last Sample that read
	// it (nil: not a cluster).
	slots []redis.ClusterSlot
}

// NewSampler returns a sampler that reads each node at most every interval.
func NewSampler(interval time.Duration, o Options) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Sampler{Interval: interval, Options: o, nodes: map[string]*Node{}, due: map[string]time.Time{}}
}

// Target is what one Sample reads.
type Target struct {
	// Client is the target's client: a cluster's (every master is read)
	// or one server's (that master).
	Client redis.UniversalClient
	// ClusterReplicas: a cluster's replicas are read too (reads go there).
	ClusterReplicas bool
	// Replicas are replicas outside a cluster that reads go to (a Sentinel
	// set's, or those a policy lists), one client each.
	Replicas []*redis.Client
}

// Sample reads the nodes of t that are due at now and returns every
// node's estimate, sorted by address. A node that fails is left out of this
// round's reading and keeps its estimate; the first error is returned.
func (s *Sampler) Sample(ctx context.Context, t Target, now time.Time) ([]Node, error) {
	type read struct {
		addr    string
		replica bool
		s       Sample
		err     error
	}
	var (
		mu    sync.Mutex
		reads []read
		addrs = map[string]bool{}
	)
	one := func(ctx context.Context, c *redis.Client, replica bool) error {
		addr := c.Options().Addr
		mu.Lock()
		addrs[addr] = true
		mu.Unlock()
		if !s.isDue(addr, now) {
			return nil
		}
		smp, err := readSample(ctx, c, now)
		mu.Lock()
		reads = append(reads, read{addr, replica, smp, err})
		mu.Unlock()
		return nil
	}
	var (
		err    error
		owners []string
		slots  []redis.ClusterSlot
	)
	switch c := t.Client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n, false) })
		if err == nil {
			owners = slotOwners(ctx, c)
			// One command per sample: the map, replicas included, that
			// capturing agents count by (docs/capture.md). A failure
			// keeps the last map.
			slots, _ = c.ClusterSlots(ctx).Result()
		}
		if err == nil && t.ClusterReplicas {
			// Reads go to the replicas: they are shards of their own.
			err = c.ForEachSlave(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n, true) })
		}
	case *redis.Client:
		err = one(ctx, c, false)
	default:
		err = fmt.Errorf("capacity: unsupported client %T", t.Client)
	}
	for _, r := range t.Replicas {
		_ = one(ctx, r, true) // its error is the read's, below
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if owners != nil {
		s.owners = owners
	}
	if len(slots) > 0 {
		s.slots = slots
	}
	for _, r := range reads {
		if r.err != nil {
			if err == nil {
				err = fmt.Errorf("capacity: sample %s: %w", r.addr, r.err)
			}
			continue
		}
		n := s.nodes[r.addr]
		if n == nil {
			n = &Node{Addr: r.addr}
			s.nodes[r.addr] = n
		}
		n.Replica = r.replica
		n.Estimate = Observe(n.Estimate, r.s, s.Options)
		s.due[r.addr] = now.Add(s.Interval)
	}
	if err == nil {
		for a := range s.nodes {
			if !addrs[a] {
				delete(s.nodes, a)
				delete(s.due, a)
			}
		}
	}
	out := make([]Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, err
}

// Owners is, per hash slot, the address of the cluster master serving it
// at the last Sample that read the topology (nil before one, or for a
// client that is not a cluster's). The slice is never modified.
func (s *Sampler) Owners() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners
}

// Slots is the cluster's slot map (CLUSTER SLOTS) at the last Sample that
// read it (nil before one, or not a cluster). The slice is never modified.
func (s *Sampler) Slots() []redis.ClusterSlot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots
}

// slotOwners asks the cluster client (its slot map, no command to Redis)
// which master serves each slot; nil if it cannot tell for some slot.
func slotOwners(ctx context.Context, c *redis.ClusterClient) []string {
	out := make([]string, routing.SlotCount)
	for i := range out {
		n, err := c.MasterForKey(ctx, routing.SlotKey(i))
		if err != nil {
			return nil
		}
		out[i] = n.Options().Addr
	}
	return out
}

// NextDue is the earliest time a known node is due again (zero if none).
func (s *Sampler) NextDue() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	for _, d := range s.due {
		if t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

func (s *Sampler) isDue(addr string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.due[addr]
	return !ok || !now.Before(d)
}

// readSample issues the one INFO of a sample.
func readSample(ctx context.Context, c *redis.Client, now time.Time) (Sample, error) {
	txt, err := c.Info(ctx, "server", "stats", "cpu", "commandstats").Result()
	if err != nil {
		return Sample{}, err
	}
	return ParseInfo(txt, now)
}

// ParseInfo reads a Sample from INFO text (sections server, stats, cpu,
// commandstats).
func ParseInfo(txt string, at time.Time) (Sample, error) {
	s := Sample{At: at}
	var cpu, mainCPU [2]float64
	var hasCmds, hasMain, hasCPU bool
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch k {
		case "run_id":
			s.RunID = v
		case "total_commands_processed":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return s, fmt.Errorf("INFO %s: %w", k, err)
			}
			s.Commands, hasCmds = n, true
		case "used_cpu_user", "used_cpu_sys", "used_cpu_user_main_thread", "used_cpu_sys_main_thread":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return s, fmt.Errorf("INFO %s: %w", k, err)
			}
			i := 0
			if strings.HasPrefix(k, "used_cpu_sys") {
				i = 1
			}
			if strings.HasSuffix(k, "_main_thread") {
				mainCPU[i], hasMain = f, true
			} else {
				cpu[i], hasCPU = f, true
			}
		default:
			if strings.HasPrefix(k, "cmdstat_") {
				calls, usec := commandStat(v)
				s.Calls += calls
				s.CallUsec += usec
			}
		}
	}
	switch {
	case !hasCmds:
		return s, fmt.Errorf("INFO lacks total_commands_processed")
	case hasMain:
		s.CPU = mainCPU[0] + mainCPU[1]
	case hasCPU:
		// Before Redis 6.2: the whole process, I/O threads and all.
		s.CPU = cpu[0] + cpu[1]
	default:
		return s, fmt.Errorf("INFO lacks used_cpu_user/used_cpu_sys")
	}
	return s, nil
}

// commandStat reads calls and usec from "calls=2,usec=85,usec_per_call=...".
func commandStat(v string) (calls, usec uint64) {
	for _, f := range strings.Split(v, ",") {
		k, n, _ := strings.Cut(f, "=")
		switch k {
		case "calls":
			calls, _ = strconv.ParseUint(n, 10, 64)
		case "usec":
			usec, _ = strconv.ParseUint(n, 10, 64)
		}
	}
	return calls, usec
}
