package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/demo/observe"
)

// Moments are the timeline of one viral key.
type Moments struct {
	Key string
	// Spike is when its traffic started.
	Spike time.Time
	// Detected, Routed: see observe.KeyTimes. Relief is when the mitigation took
	// effect: Routed for read mitigations (sidecars apply a table as they
	// receive it), the start of the first split generation's epoch for a
	// split counter. Zero when it did not happen.
	Detected, Routed, Relief time.Time
	// InForce are the thresholds on the key's master when it was routed
	// (from the policy's status then; nil if not known).
	InForce *v1alpha1.ShardThresholds
}

// SpikeToRouted is the time from the spike to the routing table listing the
// key, or -1 if it never did.
func (m Moments) SpikeToRouted() time.Duration {
	if m.Routed.IsZero() {
		return -1
	}
	return m.Routed.Sub(m.Spike)
}

// DetectionToRouting is the time from detection to routing, or -1.
func (m Moments) DetectionToRouting() time.Duration {
	if m.Routed.IsZero() || m.Detected.IsZero() {
		return -1
	}
	return m.Routed.Sub(m.Detected)
}

// SpikeToRelief is the time from the spike to relief, or -1.
func (m Moments) SpikeToRelief() time.Duration {
	if m.Relief.IsZero() {
		return -1
	}
	return m.Relief.Sub(m.Spike)
}

// Result is what a demo run measured.
type Result struct {
	Keys  Keys
	Start time.Time
	// Masters are the Redis masters' addresses, in sample order; Proxies
	// the sidecars' and APIServer the kube-apiserver's (all stopped when Run
	// returns).
	Masters   []string
	Proxies   []string
	APIServer string
	Samples   []observe.Sample
	// ViralRead and Counter are the viral keys' timelines.
	ViralRead, Counter Moments
	// EventStart is when the scheduled event started; EventRouted when the
	// last of its keys was published (zero if one never was).
	EventStart, EventRouted time.Time
	// RatioBefore is the mean busiest-master ÷ mean while a viral key was
	// hot and not yet relieved (0 if no full second was); RatioPeak the
	// highest of any second; RatioAfter the mean once both were relieved.
	RatioBefore, RatioPeak, RatioAfter float64
	// ClientReads are the GETs the clients sent during the run;
	// UpstreamReads the GET/MGET calls the masters served meanwhile.
	ClientReads, UpstreamReads int64
	// Engine are the sidecars' engine counters at the end of the run.
	Engine EngineCounts
	// CounterValue is the counter read through a proxy after traffic
	// stopped; CounterAcked the acknowledged INCRs.
	CounterValue, CounterAcked int64
	CounterErr                 error
	Counts                     Counts
	// Unavailable lists the stages this build could not run.
	Unavailable []string
	// Failures are components that stopped on their own during the run.
	Failures []error
	// Chart is the path of the PNG chart ("" if it could not be written).
	Chart string
	// Log is the path of the components' log, Policy of the applied
	// HotKeyPolicy as YAML.
	Log, Policy string
	// Shards is the policy's status.shards at the end: each master's
	// learned capacity and the thresholds in force on it.
	Shards []v1alpha1.ShardStatus
	// Calm is what the calm scenario measures (Config.Calm; also filled
	// in the others).
	Calm CalmResult
	// ReplicaReads is what the replica-reads scenario measures
	// (Config.ReplicaReads; empty in the others).
	ReplicaReads ReplicaReadsResult
}

// EventLead is how long before the event's start all its keys were
// published; negative or zero means late; ok is false if one never was.
func (r *Result) EventLead() (time.Duration, bool) {
	if r.EventRouted.IsZero() {
		return 0, false
	}
	return r.EventStart.Sub(r.EventRouted), true
}

// Run runs the scenario: set-up, traffic with the live view, summary and
// chart. It stops everything it started before returning, also when ctx is
// cancelled (then it returns what it measured so far and ctx's error).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if cfg.OutDir == "" {
		cfg.OutDir = "."
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Log: filepath.Join(cfg.OutDir, "heatsink-demo.log")}
	logFile, err := os.Create(res.Log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	logOut.set(logFile)
	defer logOut.set(io.Discard)
	log := processLogger()
	s := &stack{log: log, slog: slog.New(logr.ToSlogHandler(log.WithName("proxy")))}
	defer s.stop()

	fmt.Fprintf(out, "heatsink demo: setting up (components log to %s)\n", res.Log)
	if err := s.setUp(ctx, cfg, out); err != nil {
		return nil, err
	}
	res.Unavailable = s.unavailable
	for _, u := range res.Unavailable {
		fmt.Fprintf(out, "  ! NOT AVAILABLE: %s\n", u)
	}
	res.Masters, res.Proxies, res.APIServer = s.masters, s.proxies, s.cp.Config.Host
	keys, err := chooseKeys(s.ranges, cfg.Seed)
	if err != nil {
		return nil, err
	}
	res.Keys = keys

	obs, err := observe.NewObserver(s.cp.Config, Namespace, PolicyName)
	if err != nil {
		return nil, err
	}
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	if err := obs.Start(obsCtx); err != nil {
		return nil, err
	}

	clients := s.clients(64)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	wl := newWorkload(cfg, keys, clients)
	if err := wl.prepare(ctx); err != nil {
		return nil, fmt.Errorf("writing the initial values through a proxy: %w", err)
	}

	// Traffic starts on a whole second, so that the schedule's start (RFC
	// 3339, whole seconds) is exactly EventStart after it.
	start := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
	res.Start = start
	res.EventStart = start.Add(cfg.EventStart)
	// The platform team's part: the Redis Cluster, approved for the
	// demo's namespace; the policy names it (the manager runs without raw
	// addresses, as an install does by default).
	target := sampleTarget(s.masters)
	targetFile := filepath.Join(cfg.OutDir, "clusterredistarget.yaml")
	if err := writeYAML(targetFile, target); err != nil {
		return nil, err
	}
	if err := progress(out, cfg.Live, "kubectl apply -f "+targetFile, func() error {
		return s.cp.Client.Create(ctx, target)
	}); err != nil {
		return nil, fmt.Errorf("applying the ClusterRedisTarget: %w", err)
	}
	pol := samplePolicy(cfg, target.Name, keys, res.EventStart)
	polFile := filepath.Join(cfg.OutDir, "hotkeypolicy.yaml")
	if err := writeYAML(polFile, pol); err != nil {
		return nil, err
	}
	res.Policy = polFile
	if err := progress(out, cfg.Live, "kubectl apply -f "+polFile, func() error {
		return s.cp.Client.Create(ctx, pol)
	}); err != nil {
		return nil, fmt.Errorf("applying the HotKeyPolicy: %w", err)
	}

	smp := observe.NewSampler(s.masters)
	defer smp.Close()
	var shard *observe.Sampler
	if cfg.ReplicaReads {
		res.ReplicaReads.Nodes = append([]string{s.masters[keys.HotMaster]}, s.replicas[keys.HotMaster]...)
		shard = observe.NewSampler(res.ReplicaReads.Nodes)
		defer shard.Close()
	}
	readsBefore, err := smp.TotalReads(ctx)
	if err != nil {
		return nil, err
	}
	if d := time.Until(start); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	fmt.Fprintf(out, "heatsink demo: traffic for %s (Ctrl-C stops early)\n", cfg.Duration)

	v := &view{cfg: cfg, out: out, keys: keys, masters: res.Masters, start: start, eventStart: res.EventStart}
	hubCtx, stopHub := context.WithCancel(ctx)
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); res.Calm.watch(hubCtx, s.fleet, Namespace+"/"+PolicyName) }()
	passes := reconcilePasses(s.managerMetrics)
	runTraffic(ctx, start, smp, wl, obs, v, shard)
	stopHub()
	<-hubDone
	res.Calm.Passes = reconcilePasses(s.managerMetrics) - passes

	res.collect(wl, smp, s.metrics, clients[0], readsBefore)
	var got v1alpha1.HotKeyPolicy
	if err := s.cp.Client.Get(context.WithoutCancel(ctx), client.ObjectKeyFromObject(pol), &got); err != nil {
		res.Failures = append(res.Failures, fmt.Errorf("reading the policy's status: %w", err))
	} else {
		res.Shards = got.Status.Shards
	}
	samples, sErr := smp.Samples(), smp.Err()
	if sErr != nil {
		res.Failures = append(res.Failures, fmt.Errorf("sampling Redis: %w", sErr))
	}
	res.Samples = samples
	snap := obs.Snapshot()
	res.fillMoments(cfg, snap)
	res.Calm.fill(snap)
	if shard != nil {
		res.ReplicaReads.fill(shard.Samples(), res.ViralRead)
		if err := shard.Err(); err != nil {
			res.Failures = append(res.Failures, fmt.Errorf("sampling the viral key's shard: %w", err))
		}
	}
	res.Failures = append(res.Failures, s.failures()...)

	chart := filepath.Join(cfg.OutDir, "heatsink-demo.png")
	if err := writeChart(chart, res); err != nil {
		res.Failures = append(res.Failures, fmt.Errorf("chart: %w", err))
	} else {
		res.Chart = chart
	}
	printSummary(out, cfg, res)
	return res, ctx.Err()
}

// redisStep is the set-up step that starts Redis.
func redisStep(cfg Config) string {
	what := "Redis Cluster: 3 masters on loopback"
	if n := cfg.replicasPerMaster(); n > 0 {
		what = fmt.Sprintf("Redis Cluster: 3 masters with %d replicas each on loopback", n)
	}
	if cfg.ShardCPU > 0 {
		what += fmt.Sprintf(", each held to %s CPU", cfg.shardCPU())
	}
	return what
}

// setUp starts every component, showing progress.
func (s *stack) setUp(ctx context.Context, cfg Config, out io.Writer) error {
	steps := []struct {
		what string
		fn   func() error
	}{
		{"control plane: etcd + kube-apiserver, CRDs, webhook configurations", s.startControlPlane},
		{redisStep(cfg), func() error { return s.startRedis(ctx, cfg.replicasPerMaster(), cfg.ShardCPU) }},
		{"manager: HotKeyPolicy reconciler and admission webhooks", func() error { return s.startManager(ctx, cfg) }},
		{"node agents: node-a, node-b", s.startNodeAgents},
		{"sidecar proxies: 2 per node", func() error { return s.startProxies(ctx) }},
	}
	for _, st := range steps {
		if err := progress(out, cfg.Live, st.what, st.fn); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	return nil
}

// runTraffic runs the workload and the samplers (smp, and also any that
// is not nil) from start until the workload ends or ctx is cancelled,
// drawing the view of smp's samples each second.
func runTraffic(ctx context.Context, start time.Time, smp *observe.Sampler, wl *workload, obs *observe.Observer, v *view, also ...*observe.Sampler) {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	for _, sm := range append([]*observe.Sampler{smp}, also...) {
		if sm != nil {
			wg.Go(func() { sm.Run(runCtx, start) })
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); wl.run(runCtx, start); stopRun() }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-runCtx.Done():
			stopRun()
			wg.Wait()
			return
		case <-tick.C:
			v.draw(smp.Samples(), obs.Snapshot(), wl.counts())
		}
	}
}

// collect takes the final measurements once traffic has stopped, when every
// acknowledged increment is in Redis. It reads through the still running
// sidecars, also after an interrupt.
func (r *Result) collect(wl *workload, smp *observe.Sampler, metricsURLs []string, client redis.UniversalClient, readsBefore int64) {
	r.Counts = wl.counts()
	r.CounterAcked = r.Counts.Increments
	r.ClientReads = r.Counts.Reads
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if readsAfter, err := smp.TotalReads(ctx); err == nil {
		r.UpstreamReads = readsAfter - readsBefore
	}
	if ec, err := scrapeEngines(ctx, metricsURLs); err != nil {
		r.Failures = append(r.Failures, fmt.Errorf("reading the sidecars' metrics: %w", err))
	} else {
		r.Engine = ec
	}
	val, err := client.Get(ctx, r.Keys.Counter).Result()
	switch {
	case errors.Is(err, redis.Nil):
		r.CounterValue = 0 // never incremented (interrupted before its spike)
	case err != nil:
		r.CounterErr = err
	default:
		if r.CounterValue, err = strconv.ParseInt(val, 10, 64); err != nil {
			r.CounterErr = fmt.Errorf("counter is not an integer: %w", err)
		}
	}
}

// The loggers of controller-runtime, client-go and go-redis are process
// globals that can be set only once (controller-runtime ignores a second
// SetLogger). They are set on the first Run and write to logOut, which each
// Run points at its own log file; goroutines that outlive a Run write to
// io.Discard.
var (
	logOnce   sync.Once
	logOut    = &switchWriter{w: io.Discard}
	logGlobal logr.Logger
)

func processLogger() logr.Logger {
	logOnce.Do(func() {
		logGlobal = zap.New(zap.WriteTo(logOut))
		ctrl.SetLogger(logGlobal)
		klog.SetLogger(logGlobal.WithName("klog"))
		// go-redis reports dial failures on its own logger (stderr by
		// default); they belong in the components' log, not over the view.
		redis.SetLogger(redisLog{logGlobal.WithName("go-redis")})
	})
	return logGlobal
}

// switchWriter is an io.Writer whose destination can change.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// redisLog sends go-redis's messages to the components' log.
type redisLog struct{ log logr.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Info(fmt.Sprintf(format, v...))
}

// fillMoments derives the keys' timelines and the before/after ratios.
func (r *Result) fillMoments(cfg Config, snap observe.Snapshot) {
	m := func(key string, at time.Duration) Moments {
		kt := snap.Keys[key]
		mo := Moments{Key: key, Spike: r.Start.Add(at), Detected: kt.Detected, Routed: kt.Routed}
		for _, sh := range kt.ShardsWhenRouted {
			if r.Keys.HotMaster < len(r.Masters) && sh.Address == r.Masters[r.Keys.HotMaster] {
				mo.InForce = sh.Thresholds
			}
		}
		if !kt.Routed.IsZero() {
			mo.Relief = reliefOf(kt)
		}
		return mo
	}
	r.ViralRead = m(r.Keys.ViralRead, cfg.ViralReadAt)
	r.Counter = m(r.Keys.Counter, cfg.ViralWriteAt)
	r.EventRouted = time.Time{}
	for _, k := range r.Keys.Event {
		kt := snap.Keys[k]
		if kt.Routed.IsZero() {
			r.EventRouted = time.Time{}
			break
		}
		if kt.Routed.After(r.EventRouted) {
			r.EventRouted = kt.Routed
		}
	}

	// Before: full seconds in which a viral key was spiking unrelieved.
	unrelieved := func(mo Moments, from, to time.Time) bool {
		if to.Before(mo.Spike) || from.Before(mo.Spike) {
			return false
		}
		return mo.Relief.IsZero() || to.Before(mo.Relief) || to.Equal(mo.Relief)
	}
	// Only the viral keys the scenario drives (a rate of 0 turns one off).
	var viral []Moments
	if cfg.ViralReadRate > 0 {
		viral = append(viral, r.ViralRead)
	}
	if cfg.ViralWriteRate > 0 {
		viral = append(viral, r.Counter)
	}
	var reliefAll time.Time
	allRelieved := len(viral) > 0
	for _, mo := range viral {
		reliefAll = latest(reliefAll, mo.Relief)
		allRelieved = allRelieved && !mo.Relief.IsZero()
	}
	var before, after []float64
	for _, s := range r.Samples {
		from := s.At.Add(-time.Second)
		r.RatioPeak = max(r.RatioPeak, s.Ratio())
		if slices.ContainsFunc(viral, func(mo Moments) bool { return unrelieved(mo, from, s.At) }) {
			before = append(before, s.Ratio())
		}
		if allRelieved && from.After(reliefAll.Add(2*time.Second)) {
			after = append(after, s.Ratio())
		}
	}
	r.RatioBefore, r.RatioAfter = mean(before), mean(after)
}

func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// writeYAML writes obj as YAML, so the user sees the policy that was
// applied.
func writeYAML(path string, obj any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// TargetName is the ClusterRedisTarget the demo's policy names.
const TargetName = "demo-redis-cluster"

// sampleTarget is the ClusterRedisTarget the demo applies: its Redis
// Cluster's masters, for the demo's namespace only.
func sampleTarget(addrs []string) *v1alpha1.ClusterRedisTarget {
	t := &v1alpha1.ClusterRedisTarget{Spec: v1alpha1.ClusterRedisTargetSpec{
		Addresses: addrs, Cluster: true,
		AllowedNamespaces: v1alpha1.AllowedNamespaces{Names: []string{Namespace}},
	}}
	t.APIVersion, t.Kind = v1alpha1.GroupVersion.String(), "ClusterRedisTarget"
	t.Name = TargetName
	return t
}

// samplePolicy is the policy the demo applies: like the samples in
// config/samples, with short windows so that it reacts within seconds.
func samplePolicy(cfg Config, target string, keys Keys, eventStart time.Time) *v1alpha1.HotKeyPolicy {
	on := func() *bool { b := true; return &b }
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	spec := v1alpha1.HotKeyPolicySpec{
		Mode:   v1alpha1.ModeEnforce,
		Target: v1alpha1.RedisTarget{ClusterTargetRef: &v1alpha1.ClusterTargetReference{Name: target}},
		Keys:   v1alpha1.KeySelector{Include: []string{"product:*", "likes:*", "sale:*", "user:*"}, Exclude: []string{"session:*"}},
		Detection: v1alpha1.Detection{
			Window: d(cfg.Window), ReportInterval: d(cfg.ReportInterval), TopK: 64,
		},
		Thresholds: v1alpha1.Thresholds{
			ReadsPerSecond: cfg.ReadsPerSecond, WritesPerSecond: cfg.WritesPerSecond,
			SustainFor: d(cfg.SustainFor), Cooldown: d(cfg.Cooldown), HysteresisPercent: 20,
		},
		Capacity: v1alpha1.Capacity{PerShardWritesPerSecond: cfg.PerShardWritesPerSecond, HeadroomPercent: 25},
		Mitigations: v1alpha1.Mitigations{
			Coalesce:   v1alpha1.Coalesce{Enabled: on()},
			LocalCache: v1alpha1.LocalCache{Enabled: on(), TTL: d(time.Second), JitterPercent: 10},
			Replicate:  v1alpha1.Replicate{Enabled: on(), MaxReplicas: 8},
			Split:      v1alpha1.Split{Enabled: on(), MaxShards: 16, Epoch: d(cfg.Epoch)},
		},
		Schedules: []v1alpha1.Schedule{{
			Name:     "flash-sale",
			Start:    &metav1.Time{Time: eventStart},
			Duration: d(cfg.EventDuration),
			LeadTime: d(cfg.EventLead),
			Keys:     keys.Event,
			Mitigation: v1alpha1.ScheduledMitigation{
				Replicate:  &v1alpha1.ScheduledReplicate{Replicas: 4},
				LocalCache: &v1alpha1.ScheduledLocalCache{},
			},
		}},
	}
	if cfg.Calm {
		spec.Schedules = nil
	}
	if cfg.ReplicaReads {
		// Reads of a hot key must not be cached nor copied: the replicas
		// the shard has anyway serve them. Each master is declared to take
		// half the viral key's rate, so replica reads are needed.
		off := func() *bool { b := false; return &b }
		spec.Schedules = nil
		spec.Mitigations.LocalCache.Enabled = off()
		spec.Mitigations.Replicate.Enabled = off()
		spec.Mitigations.ReplicaReads.Enabled = on()
		spec.Capacity.PerShardReadsPerSecond = int64(cfg.ViralReadRate / 2)
	}
	if a := cfg.Auto; a != nil {
		// No rate typed: every threshold and the split's sizing come from
		// each master's learned capacity.
		spec.Thresholds.ReadsPerSecond, spec.Thresholds.WritesPerSecond = 0, 0
		spec.Capacity.PerShardWritesPerSecond = 0
		spec.Thresholds.Auto = &v1alpha1.AutoThresholds{
			KeySharePercent: a.KeySharePercent, TargetUtilizationPercent: a.TargetUtilizationPercent,
		}
		spec.Thresholds.Auto.ShardCPU = cfg.shardCPU()
	}
	v1alpha1.SetDefaults(&spec)
	p := &v1alpha1.HotKeyPolicy{Spec: spec}
	p.APIVersion, p.Kind = v1alpha1.GroupVersion.String(), "HotKeyPolicy"
	p.Name, p.Namespace = PolicyName, Namespace
	return p
}
