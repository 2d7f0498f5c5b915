// Package observe measures a running heatsink from outside, as its users
// would: the load on each Redis master, from Redis's own INFO counters, and
// when the routing table first listed each key, from the API server. The
// demo and the e2e test both report these numbers, so they measure them
// with this one implementation. It lives under demo/ because it is a
// harness: cmd/heatsink must not link it (cmd/heatsink's deps test).
package observe

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sample is one second of load on every master, as Redis counted it.
type Sample struct {
	// At is when the sample was taken, T its offset from the start of
	// traffic.
	At time.Time
	T  time.Duration
	// OpsPerSec per master: total_commands_processed delta per second,
	// minus the sampler's own INFO.
	OpsPerSec []float64
	// ReadsPerSec per master: GET and MGET calls per second (commandstats).
	ReadsPerSec []float64
}

// Ratio is the busiest master's ops/s divided by the mean of all masters.
func (s Sample) Ratio() float64 {
	var sum, top float64
	for _, v := range s.OpsPerSec {
		sum += v
		top = max(top, v)
	}
	if sum == 0 {
		return 0
	}
	return top / (sum / float64(len(s.OpsPerSec)))
}

// counters are the INFO fields the sampler reads.
type counters struct {
	commands int64 // total_commands_processed
	reads    int64 // cmdstat_get + cmdstat_mget calls
}

// parseInfo reads total_commands_processed and the GET/MGET call counts from
// an INFO reply.
func parseInfo(info string) (counters, error) {
	var c counters
	found := false
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "total_commands_processed:"):
			v, err := strconv.ParseInt(strings.TrimPrefix(line, "total_commands_processed:"), 10, 64)
			if err != nil {
				return c, fmt.Errorf("INFO total_commands_processed: %w", err)
			}
			c.commands, found = v, true
		case strings.HasPrefix(line, "cmdstat_get:"), strings.HasPrefix(line, "cmdstat_mget:"):
			// cmdstat_get:calls=12,usec=...
			_, rest, _ := strings.Cut(line, ":")
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return c, fmt.Errorf("INFO %s: %w", line, err)
					}
					c.reads += n
				}
			}
		}
	}
	if !found {
		return c, fmt.Errorf("INFO reply has no total_commands_processed")
	}
	return c, nil
}

// rates turns two readings of every master, seconds apart, into a sample's
// per-second rates.
func rates(prev, cur []counters, seconds float64) (ops, reads []float64) {
	ops, reads = make([]float64, len(cur)), make([]float64, len(cur))
	for i := range cur {
		// The INFO call itself is one command on each master.
		ops[i] = max(0, float64(cur[i].commands-prev[i].commands-1)/seconds)
		reads[i] = float64(cur[i].reads-prev[i].reads) / seconds
	}
	return ops, reads
}

// Sampler measures each master's ops/s once a second.
type Sampler struct {
	masters []*redis.Client

	mu      sync.Mutex
	samples []Sample
	err     error
}

// NewSampler returns a sampler of the masters at addrs, in that order. Close
// it when done.
func NewSampler(addrs []string) *Sampler {
	s := &Sampler{}
	for _, a := range addrs {
		s.masters = append(s.masters, redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true, PoolSize: 1}))
	}
	return s
}

func (s *Sampler) read(ctx context.Context) ([]counters, error) {
	out := make([]counters, len(s.masters))
	for i, m := range s.masters {
		info, err := m.Info(ctx, "stats", "commandstats").Result()
		if err != nil {
			return nil, fmt.Errorf("INFO on master %d: %w", i, err)
		}
		if out[i], err = parseInfo(info); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Run samples every second until ctx ends; each sample's T is its offset
// from start. A failed reading is skipped and kept as Err.
func (s *Sampler) Run(ctx context.Context, start time.Time) {
	prev, err := s.read(ctx)
	if err != nil {
		s.setErr(err)
		return
	}
	prevAt := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := s.read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.setErr(err)
			}
			continue
		}
		now := time.Now()
		smp := Sample{At: now, T: now.Sub(start)}
		smp.OpsPerSec, smp.ReadsPerSec = rates(prev, cur, now.Sub(prevAt).Seconds())
		prev, prevAt = cur, now
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
	}
}

func (s *Sampler) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Samples returns the samples so far.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...)
}

// Err returns the last reading's error, if any.
func (s *Sampler) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// AtLeast returns nil once there are n samples, and otherwise says how many
// there are and the last error (for polling with eventually).
func (s *Sampler) AtLeast(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) >= n {
		return nil
	}
	return fmt.Errorf("%d samples of %d (last error: %v)", len(s.samples), n, s.err)
}

// TotalReads returns the GET/MGET calls every master has served so far.
func (s *Sampler) TotalReads(ctx context.Context) (int64, error) {
	cs, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cs {
		n += c.reads
	}
	return n, nil
}

// Close closes the connections to the masters.
func (s *Sampler) Close() {
	for _, m := range s.masters {
		_ = m.Close()
	}
}
