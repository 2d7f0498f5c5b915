//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/heatsink-dev/heatsink/controllers"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/scheme"
	"github.com/heatsink-dev/heatsink/routing"
)

// observer watches the policy's routing ConfigMap and remembers when each
// key was first over a threshold (the manager's published state says when
// it first saw it so), first routed, and which keys the table ever dropped.
type observer struct {
	mu         sync.Mutex
	policy     string
	detectedAt map[string]time.Time
	routedAt   map[string]time.Time
	latest     *routing.Table
	lost       map[string]bool
}

func newObserver(t *testing.T, ctx context.Context, _ client.Client, ns, policy string) *observer {
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme.New(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{policy: policy, detectedAt: map[string]time.Time{}, routedAt: map[string]time.Time{}, lost: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	for obj, on := range map[client.Object]func(any){
		&corev1.ConfigMap{}: o.onConfigMap,
	} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    on,
			UpdateFunc: func(_, o any) { on(o) },
		}); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("observer: caches did not sync")
	}
	return o
}

func (o *observer) onConfigMap(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != routing.ConfigMapName(o.policy) {
		return
	}
	now := time.Now()
	t, err := routing.Parse([]byte(cm.Data[routing.ConfigMapKey]))
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.latest != nil {
		for _, e := range o.latest.Entries {
			if t.Lookup(e.Key) == nil {
				o.lost[e.Key] = true
			}
		}
	}
	o.latest = t
	var st decide.State
	if json.Unmarshal([]byte(cm.Data[controllers.StateKey]), &st) == nil {
		for key, at := range st.FirstOver() {
			if cur, seen := o.detectedAt[key]; !seen || at.Before(cur) {
				o.detectedAt[key] = at
			}
		}
	}
	for _, e := range t.Entries {
		if _, seen := o.routedAt[e.Key]; !seen {
			o.routedAt[e.Key] = now
		}
	}
}

// pick returns the moments of keys in m that are set.
func pick(m map[string]time.Time, keys []string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func (o *observer) routed(keys ...string) map[string]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return pick(o.routedAt, keys)
}

func (o *observer) detected(keys ...string) map[string]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return pick(o.detectedAt, keys)
}

func (o *observer) table() *routing.Table {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.latest
}

func (o *observer) lostKeys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return sortedKeys(o.lost)
}

// sample is one second of load on every master, as Redis counted it.
type sample struct {
	at  time.Time
	ops []float64 // total_commands_processed per second, minus our INFO
}

func (s sample) ratio() float64 {
	var sum, top float64
	for _, v := range s.ops {
		sum += v
		top = max(top, v)
	}
	if sum == 0 {
		return 0
	}
	return top / (sum / float64(len(s.ops)))
}

// sampler reads INFO stats from every master once a second, as the demo
// does.
type sampler struct {
	masters []*redis.Client
	mu      sync.Mutex
	samples []sample
	err     error
}

func newSampler(addrs []string) *sampler {
	s := &sampler{}
	for _, a := range addrs {
		s.masters = append(s.masters, redis.NewClient(&redis.Options{Addr: a, Protocol: 2, DisableIdentity: true, PoolSize: 1}))
	}
	return s
}

func (s *sampler) read(ctx context.Context) ([]int64, error) {
	out := make([]int64, len(s.masters))
	for i, m := range s.masters {
		info, err := m.Info(ctx, "stats").Result()
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "total_commands_processed:"); ok {
				if out[i], err = strconv.ParseInt(v, 10, 64); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func (s *sampler) run(ctx context.Context) {
	prev, err := s.read(ctx)
	if err != nil {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return
	}
	prevAt := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur, err := s.read(ctx)
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			continue
		}
		now := time.Now()
		dt := now.Sub(prevAt).Seconds()
		smp := sample{at: now, ops: make([]float64, len(cur))}
		for i := range cur {
			smp.ops[i] = max(0, float64(cur[i]-prev[i]-1)/dt)
		}
		prev, prevAt = cur, now
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
	}
}

func (s *sampler) snapshot() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

func (s *sampler) atLeast(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) >= n {
		return nil
	}
	return fmt.Errorf("%d samples of %d (last error: %v)", len(s.samples), n, s.err)
}

// calm returns the start of the first run of n seconds whose busiest master
// is within limit× the mean, after the first second past from that was not.
func (s *sampler) calm(from time.Time, limit float64, n int) (time.Time, bool) {
	smp := s.snapshot()
	run, hot := 0, false
	for i, x := range smp {
		if x.at.Before(from) {
			continue
		}
		if !hot {
			hot = x.ratio() > limit
			continue
		}
		if x.ratio() <= limit {
			run++
			if run == n {
				return smp[i-n+1].at, true
			}
		} else {
			run = 0
		}
	}
	return time.Time{}, false
}

func (s *sampler) lastRatios(n int) []string {
	smp := s.snapshot()
	var out []string
	for _, x := range smp[max(0, len(smp)-n):] {
		out = append(out, fmt.Sprintf("%.2f", x.ratio()))
	}
	return out
}

func (s *sampler) close() {
	for _, m := range s.masters {
		_ = m.Close()
	}
}

// ratios returns the mean and the peak busiest ÷ mean of the samples in
// [from, to); a zero to means to the end.
func ratios(smp []sample, from, to time.Time) (mean, peak float64) {
	n := 0
	for _, x := range smp {
		if x.at.Before(from) || (!to.IsZero() && !x.at.Before(to)) {
			continue
		}
		r := x.ratio()
		mean += r
		peak = max(peak, r)
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return mean / float64(n), peak
}
