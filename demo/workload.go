package demo

import (
	"context"
	"errors"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// stream is one kind of traffic: rate ops/s between From and To (offsets from
// the start of traffic), spread over workers that each use one client.
type stream struct {
	name     string
	rate     int
	from, to time.Duration
	// op does one operation with the worker's client and random source.
	op func(ctx context.Context, c redis.UniversalClient, r *rng) error
}

// rng is a worker's random source and its Zipf draw over the background
// keys' ranks (exponent 1.1: rand.Zipf needs one above 1).
type rng struct {
	*rand.Rand
	zipf *rand.Zipf
}

// Counts are what the workload did, as acknowledged by the proxies.
type Counts struct {
	// Ops and Errors per stream name.
	Ops, Errors map[string]int64
	// Reads is every GET the clients sent (all streams).
	Reads int64
	// Increments is the number of INCRs of the counter that were
	// acknowledged (a reply without error).
	Increments int64
	// LastError is the text of the last error, if any.
	LastError string
}

// workload generates the scenario's traffic.
type workload struct {
	cfg     Config
	keys    Keys
	clients []redis.UniversalClient
	streams []stream

	reads, incrs atomic.Int64
	mu           sync.Mutex
	ops, errs    map[string]*atomic.Int64
	lastErr      string
}

var errNoClients = errors.New("workload: no clients")

func newWorkload(cfg Config, keys Keys, clients []redis.UniversalClient) *workload {
	w := &workload{cfg: cfg, keys: keys, clients: clients, ops: map[string]*atomic.Int64{}, errs: map[string]*atomic.Int64{}}
	value := make([]byte, 64)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	get := func(ctx context.Context, c redis.UniversalClient, key string) error {
		w.reads.Add(1)
		err := c.Get(ctx, key).Err()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	}
	end := cfg.Duration
	eventEnd := min(cfg.EventStart+cfg.EventDuration, end)
	w.streams = []stream{
		{name: "background", rate: cfg.BackgroundRate, from: 0, to: end, op: func(ctx context.Context, c redis.UniversalClient, r *rng) error {
			// Zipf over ranks: a few user keys are warm, none is hot.
			k := keys.Background + strconv.Itoa(int(r.zipf.Uint64()))
			if r.Intn(5) == 0 {
				return c.Set(ctx, k, value, 0).Err()
			}
			return get(ctx, c, k)
		}},
		{name: "viral-read", rate: cfg.ViralReadRate, from: cfg.ViralReadAt, to: end, op: func(ctx context.Context, c redis.UniversalClient, _ *rng) error {
			return get(ctx, c, keys.ViralRead)
		}},
		{name: "viral-write", rate: cfg.ViralWriteRate, from: cfg.ViralWriteAt, to: end, op: func(ctx context.Context, c redis.UniversalClient, _ *rng) error {
			if err := c.Incr(ctx, keys.Counter).Err(); err != nil {
				return err
			}
			w.incrs.Add(1)
			return nil
		}},
		{name: "counter-read", rate: 5, from: cfg.ViralWriteAt, to: end, op: func(ctx context.Context, c redis.UniversalClient, _ *rng) error {
			return get(ctx, c, keys.Counter)
		}},
		{name: "event", rate: cfg.EventRate, from: cfg.EventStart, to: eventEnd, op: func(ctx context.Context, c redis.UniversalClient, r *rng) error {
			return get(ctx, c, keys.Event[r.Intn(len(keys.Event))])
		}},
	}
	for _, s := range w.streams {
		w.ops[s.name] = new(atomic.Int64)
		w.errs[s.name] = new(atomic.Int64)
	}
	return w
}

// prepare writes the initial values: the viral and event keys exist, the
// counter starts from nothing.
func (w *workload) prepare(ctx context.Context) error {
	if len(w.clients) == 0 {
		return errNoClients
	}
	c := w.clients[0]
	if err := c.Set(ctx, w.keys.ViralRead, "the product page everyone opens", 0).Err(); err != nil {
		return err
	}
	for _, k := range w.keys.Event {
		if err := c.Set(ctx, k, "limited offer", 0).Err(); err != nil {
			return err
		}
	}
	return c.Del(ctx, w.keys.Counter).Err()
}

// run generates traffic from start until cfg.Duration has passed or ctx ends.
func (w *workload) run(ctx context.Context, start time.Time) {
	var wg sync.WaitGroup
	id := 0
	for _, s := range w.streams {
		if s.rate <= 0 || s.from >= s.to {
			continue
		}
		// One worker per ~250 ops/s keeps each worker's pacing interval
		// well above the scheduler's granularity; at least one per client so
		// every proxy sees every stream.
		n := max((s.rate+249)/250, min(len(w.clients), s.rate))
		for i := 0; i < n; i++ {
			c := w.clients[id%len(w.clients)]
			src := rand.New(rand.NewSource(w.cfg.Seed*7919 + int64(id)))
			r := &rng{Rand: src, zipf: rand.NewZipf(src, 1.1, 1, uint64(w.cfg.BackgroundKeys-1))}
			interval := time.Duration(float64(time.Second) * float64(n) / float64(s.rate))
			wg.Add(1)
			go func(s stream, c redis.UniversalClient, r *rng, interval time.Duration) {
				defer wg.Done()
				w.worker(ctx, start, s, c, r, interval)
			}(s, c, r, interval)
			id++
		}
	}
	wg.Wait()
}

// worker paces one share of a stream. Pacing is by schedule: it sleeps until
// its next slot; when it falls more than a second behind (the machine is
// saturated) it drops the backlog instead of bursting.
func (w *workload) worker(ctx context.Context, start time.Time, s stream, c redis.UniversalClient, r *rng, interval time.Duration) {
	// Spread the workers' first slots over one interval.
	next := start.Add(s.from + time.Duration(r.Int63n(int64(interval)+1)))
	stop := start.Add(s.to)
	ops, errs := w.ops[s.name], w.errs[s.name]
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		now := time.Now()
		if d := next.Sub(now); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if -d > time.Second {
			next = now
		}
		if !time.Now().Before(stop) || ctx.Err() != nil {
			return
		}
		opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.op(opCtx, c, r)
		cancel()
		if err != nil && ctx.Err() == nil {
			errs.Add(1)
			w.mu.Lock()
			w.lastErr = s.name + ": " + err.Error()
			w.mu.Unlock()
		} else if err == nil {
			ops.Add(1)
		}
		next = next.Add(interval)
	}
}

// counts returns what the workload did so far.
func (w *workload) counts() Counts {
	c := Counts{Ops: map[string]int64{}, Errors: map[string]int64{}, Reads: w.reads.Load(), Increments: w.incrs.Load()}
	for name, v := range w.ops {
		c.Ops[name] = v.Load()
	}
	for name, v := range w.errs {
		c.Errors[name] = v.Load()
	}
	w.mu.Lock()
	c.LastError = w.lastErr
	w.mu.Unlock()
	return c
}
