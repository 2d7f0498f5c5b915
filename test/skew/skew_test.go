// Package skew tests docs/install.md's version skew policy with the
// previous release's own binary (release.yaml's previous.commit, built by
// procstack.PreviousRelease) beside this tree's: managers, node agents and
// sidecars of both versions as processes, against a real kube-apiserver
// and real redis-servers, driven by go-redis clients in their default
// configuration.
package skew

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/release"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/heatsinkbin"
	"github.com/heatsink-dev/heatsink/internal/testing/procstack"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/webhook"
)

const (
	namespace      = "skew"
	readThreshold  = 50 // per second
	writeThreshold = 20 // per second
	// perShardReads is what one physical key may serve: the hot key's
	// 200 GETs/s (250 with the 25 % headroom) need more than its master,
	// so the policy sends them to the replica (which the policy prefers
	// to copies, decide.detectedEntry). Copies come from the schedule.
	perShardReads = 60 // per second
	maxReplicas   = 3
)

// node is one simulated node of the matrix: its node agent's version and
// its one pod's sidecar version.
type node struct {
	name           string
	agent, sidecar string // "previous" or "this"
}

// TestSkewThisManager is the policy's supported skew after an upgrade:
// this release's manager with node agents and sidecars of the previous
// release and of this one, in every pairing a node can hold while the
// DaemonSet rolls and pods are recreated. Each node's pod has a policy
// and a redis-server of its own, so every pairing must itself carry its
// key's counts to the manager, follow the table and apply the moves:
// local cache, coalescing and replica reads of a read-hot key (read from
// the master's replica), a scheduled replication pre-warmed before its
// event (copies filled by the manager, held by the sidecar before the
// start, read from it, left at its end), shedding of a write-hot list, a
// split, pre-aggregated counter exact.
func TestSkewThisManager(t *testing.T) {
	runMatrix(t, "this", []node{
		{"node-a", "previous", "previous"},
		{"node-b", "previous", "this"},
		{"node-c", "this", "previous"},
	})
}

// TestSkewPreviousManager is the other side of an upgrade: the node agent
// DaemonSet and new pods may run this release while the manager's
// Deployment still runs the previous one (Helm rolls both at once), and a
// rollback of the manager leaves them so. This release's node agents and
// sidecars must then write what the previous manager and agents read.
func TestSkewPreviousManager(t *testing.T) {
	runMatrix(t, "previous", []node{
		{"node-a", "this", "this"},
		{"node-b", "previous", "this"},
		{"node-c", "this", "previous"},
	})
}

func runMatrix(t *testing.T, manager string, nodes []node) {
	if testing.Short() {
		t.Skip("processes, a kube-apiserver and redis-servers")
	}
	if err := redisproc.Available(); err != nil {
		t.Skip(err)
	}
	prev := procstack.PreviousRelease(t)
	bins := map[string]string{"this": heatsinkbin.Path(t), "previous": prev.Bin}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := release.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	// The image tags the pods' sidecars carry, as each release's injector
	// writes them.
	tags := map[string]string{"this": rel.ImageTag(), "previous": release.SemVer(prev.Version)}
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	var extra []string
	if procstack.SupportsFlag(bins[manager], "manager", "allow-raw-target-addresses") {
		extra = append(extra, "--allow-raw-target-addresses=true")
	}
	m := procstack.StartManager(t, cp, bins[manager], extra...)
	for _, n := range nodes {
		t.Run(fmt.Sprintf("%s/agent-%s/sidecar-%s", n.name, n.agent, n.sidecar), func(t *testing.T) {
			t.Parallel()
			a := procstack.StartAgent(t, bins[n.agent], n.name, m)
			runNode(t, cp, a, bins[n.sidecar], tags[n.sidecar], n, manager == "this")
		})
	}
}

// runNode runs one node's pod: its policy, its Redis, its sidecar, the
// workload, and the checks.
//
// With this release's manager, the policy's status.sidecarVersions counts
// the pod under its sidecar's version (tag).
func runNode(t *testing.T, cp *controlplane.ControlPlane, a *procstack.Agent, sidecarBin, tag string, n node, statusVersions bool) {
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rep := startReplica(t, srv)
	policy := "p-" + n.name
	hot, ctr, q, warm := "hot:"+n.name, "ctr:"+n.name, "q:"+n.name, "warm:"+n.name
	event := newWarmEvent(warm, time.Now())
	createPolicy(t, cp, policy, srv.Addr, rep.Addr, event.schedule())
	createPod(t, cp, policy, n.name, tag, n.sidecar == "this")
	sc := procstack.StartSidecar(t, sidecarBin, a, srv.Addr, namespace, policy)
	c := redis.NewClient(&redis.Options{Addr: sc.Addr}) // go-redis' defaults
	defer c.Close()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	eventually.True(t, 30*time.Second, "the sidecar answers PING", func() bool { return c.Ping(ctx).Err() == nil })
	if statusVersions {
		eventually.Succeeds(t, 60*time.Second, func() error {
			p := &v1alpha1.HotKeyPolicy{}
			if err := cp.Client.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: policy}, p); err != nil {
				return err
			}
			want := []v1alpha1.SidecarVersionCount{{Version: tag, Pods: 1}}
			if !slices.Equal(p.Status.SidecarVersions, want) {
				return fmt.Errorf("status.sidecarVersions %v, want %v", p.Status.SidecarVersions, want)
			}
			return nil
		})
	}

	for k, v := range map[string]string{hot: "v", warm: "w"} {
		if err := direct.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var gets, wrongGets, warmGets, incrs, incrErrs, pushes, shed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Bounded loads: 200 reads/s, 100 increments/s and 50 pushes/s at
	// most, for 120 s at most, each well over its threshold.
	load := func(every time.Duration, op func()) {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		end := time.After(120 * time.Second)
		for {
			select {
			case <-stop:
				return
			case <-end:
				return
			case <-tick.C:
				op()
			}
		}
	}
	wg.Add(4)
	// The scheduled key, read under its threshold.
	go load(warmEvery, func() {
		if v, err := c.Get(ctx, warm).Result(); err == nil {
			warmGets.Add(1)
			if v != "w" {
				wrongGets.Add(1)
			}
		}
	})
	go load(5*time.Millisecond, func() {
		if v, err := c.Get(ctx, hot).Result(); err == nil {
			gets.Add(1)
			if v != "v" {
				wrongGets.Add(1)
			}
		}
	})
	go load(10*time.Millisecond, func() {
		if err := c.Incr(ctx, ctr).Err(); err == nil {
			incrs.Add(1)
		} else {
			incrErrs.Add(1)
		}
	})
	// A write-hot list, which split cannot serve: the shed move's key.
	go load(20*time.Millisecond, func() {
		switch err := c.LPush(ctx, q, "x").Err(); {
		case err == nil:
			pushes.Add(1)
		case strings.HasPrefix(err.Error(), routing.ShedCode+" "):
			shed.Add(1)
		}
	})
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	// The scheduled event runs by the clock beside the other checks.
	warmErr := make(chan error, 1)
	wctx, cancelWarm := context.WithCancel(ctx)
	defer cancelWarm() // a check that failed first ends it
	go func() { warmErr <- event.check(wctx, cp, direct, srv.Addr, sc.Metrics, policy, warmGets.Load, t.Logf) }()

	// The read move: the table caches the hot key, and Redis then sees
	// fewer GETs than the client sends (the sidecar serves the rest).
	eventually.True(t, 90*time.Second, "the table caches and coalesces "+hot, func() bool {
		e := entry(t, cp, policy, hot)
		return e != nil && e.LocalCache != nil && e.Coalesce
	})
	// A window of 200 client GETs in which Redis served fewer than half
	// (the sidecar takes the table a moment after it is published).
	masterGets := startMonitor(t, srv.Addr, hot)
	eventually.Succeeds(t, 30*time.Second, func() error {
		g0, r0 := gets.Load(), masterGets.count()
		if err := eventually.Poll(ctx, 10*time.Second, func() error {
			if gets.Load()-g0 < 200 {
				return fmt.Errorf("%d GETs", gets.Load()-g0)
			}
			return nil
		}); err != nil {
			return err
		}
		if served, r := gets.Load()-g0, masterGets.count()-r0; r > served/2 {
			return fmt.Errorf("Redis served %d of the client's %d GETs of the cached key: the sidecar does not apply the local cache", r, served)
		}
		return nil
	})
	checkReplicaReads(t, ctx, cp, policy, hot, masterGets, startMonitor(t, rep.Addr, hot), gets.Load)
	masterGets.stop()
	// The shed move: the table sheds the list's writes to a budget of
	// 16/s (80 % of perShardWritesPerSecond), and the sidecar answers
	// the excess of the client's 50/s with the shed error, so Redis takes
	// under half the pushes the client sends (all without it).
	eventually.True(t, 90*time.Second, "the table sheds "+q, func() bool {
		e := entry(t, cp, policy, q)
		return e != nil && e.Shed != nil && e.Shed.WritesPerSecond > 0
	})
	eventually.Succeeds(t, 30*time.Second, func() error {
		p0, s0, r0 := pushes.Load(), shed.Load(), redisCalls(t, direct, "lpush")
		if err := eventually.Poll(ctx, 10*time.Second, func() error {
			if sent := pushes.Load() - p0 + shed.Load() - s0; sent < 100 {
				return fmt.Errorf("%d LPUSHes", sent)
			}
			return nil
		}); err != nil {
			return err
		}
		sent, r := pushes.Load()-p0+shed.Load()-s0, redisCalls(t, direct, "lpush")-r0
		if r > sent/2 || shed.Load() == s0 {
			return fmt.Errorf("Redis took %d of the client's %d LPUSHes of the shed key (%d shed errors): the sidecar does not apply shedding", r, sent, shed.Load()-s0)
		}
		return nil
	})
	// The write move: the counter splits, and the sidecar writes its
	// shards.
	eventually.True(t, 90*time.Second, "the table splits "+ctr, func() bool {
		e := entry(t, cp, policy, ctr)
		return e != nil && e.Split != nil
	})
	eventually.True(t, 30*time.Second, "a shard of "+ctr+" in Redis", func() bool {
		keys, _ := direct.Keys(ctx, "*"+ctr+"*").Result()
		for _, k := range keys {
			if k != ctr {
				return true
			}
		}
		return false
	})
	// Pre-aggregation: the sidecar sums the increments and flushes them
	// every 100 ms, so Redis takes fewer INCRBYs than the client sends
	// INCRs (one each without it).
	eventually.True(t, 30*time.Second, "the table pre-aggregates "+ctr, func() bool {
		e := entry(t, cp, policy, ctr)
		return e != nil && e.PreAggregate != nil
	})
	eventually.Succeeds(t, 30*time.Second, func() error {
		i0, r0 := incrs.Load(), redisCalls(t, direct, "incr", "incrby")
		if err := eventually.Poll(ctx, 10*time.Second, func() error {
			if incrs.Load()-i0 < 100 {
				return fmt.Errorf("%d INCRs", incrs.Load()-i0)
			}
			return nil
		}); err != nil {
			return err
		}
		if sent, r := incrs.Load()-i0, redisCalls(t, direct, "incr", "incrby")-r0; r > sent/2 {
			return fmt.Errorf("Redis took %d INCR/INCRBYs for the client's %d INCRs of the pre-aggregated counter: the sidecar does not apply pre-aggregation", r, sent)
		}
		return nil
	})
	i0 := incrs.Load()
	eventually.True(t, 30*time.Second, "100 increments of the split counter", func() bool { return incrs.Load()-i0 >= 100 })
	if err := <-warmErr; err != nil {
		t.Error(err)
	}
	stopLoad()

	// Exact: every acknowledged increment counted once, through the
	// sidecar (which sums the shards), and in the base key alone once the
	// policy is deleted (the manager folds the shards back).
	want := incrs.Load()
	t.Logf("%s: %d GETs (%d of %s), %d INCRs acknowledged, %d refused, %d LPUSHes acknowledged, %d shed", n.name, gets.Load()+warmGets.Load(), warmGets.Load(), warm, want, incrErrs.Load(), pushes.Load(), shed.Load())
	if w := wrongGets.Load(); w > 0 {
		t.Errorf("%s: %d GETs of %s or %s through the sidecar did not return its value", n.name, w, hot, warm)
	}
	// A pre-aggregated flush whose reply timed out after Redis applied it
	// stays pending and is written again (docs/engine.md: the mode is
	// approximate): on a loaded machine the previous release's sidecar
	// left 477 increments in a shard after the fold. So the counter must
	// be exact unless the sidecar met upstream errors; then it may read
	// high, never low.
	overCount := func(what string, got int64) {
		switch errs, err := metricValue(sc.Metrics, "heatsink_engine_upstream_errors_total"); {
		case got == want:
		case got > want && err == nil && errs > 0:
			t.Logf("%s: %s is %d, %d over the %d acknowledged increments, after %g upstream errors (a timed-out flush applied twice)", n.name, what, got, got-want, want, errs)
		default:
			t.Errorf("%s: %s is %d, want the %d acknowledged increments (%g upstream errors, %v)", n.name, what, got, want, errs, err)
		}
	}
	got, err := c.Get(ctx, ctr).Int64()
	if err != nil {
		t.Errorf("%s: reading the split counter through the sidecar: %v", n.name, err)
	}
	overCount("the split counter read through the sidecar", got)
	p := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: policy}}
	if err := cp.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The manager folds the shards back into the base key: the sum of
	// every place is the count, and the base key holds it once folded.
	// The folded shards stay, at 0, until their retirement TTL
	// (docs/manager.md).
	var base, shards int64
	_ = eventually.Poll(ctx, 60*time.Second, func() error {
		var err error
		if base, err = direct.Get(ctx, ctr).Int64(); err != nil {
			return err
		}
		keys, err := direct.Keys(ctx, "*hs:s:*"+ctr).Result()
		if err != nil {
			return err
		}
		shards = 0
		for _, k := range keys {
			if strings.Contains(k, "hs:aux:") {
				continue
			}
			v, err := direct.Get(ctx, k).Int64()
			if err != nil {
				return err
			}
			shards += v
		}
		if base != want || shards != 0 {
			return fmt.Errorf("after the policy's deletion %s = %d and its shards hold %d", ctr, base, shards)
		}
		return nil
	})
	overCount("the base key after the fold", base)
	overCount("the base key and its shards after the fold", base+shards)
}

// metricValue is the value of the series named name (no labels) in the
// Prometheus text at url.
func metricValue(url, name string) (float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// createPolicy creates the policy of one node's Redis (its master addr and
// the master's replica), its defaults applied (no webhook runs):
// coalesce, local cache, replica reads, replicate, split, pre-aggregate
// and shedding allowed, low thresholds, and the schedule sched.
func createPolicy(t *testing.T, cp *controlplane.ControlPlane, name, addr, replica string, sched v1alpha1.Schedule) {
	t.Helper()
	on := ptr.To(true)
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	p := &v1alpha1.HotKeyPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	p.Spec = v1alpha1.HotKeyPolicySpec{
		Mode:      v1alpha1.ModeEnforce,
		Target:    v1alpha1.RedisTarget{Addresses: []string{addr}},
		Keys:      v1alpha1.KeySelector{Include: []string{"*"}},
		Detection: v1alpha1.Detection{Window: d(2 * time.Second), ReportInterval: d(500 * time.Millisecond), TopK: 64},
		Thresholds: v1alpha1.Thresholds{ReadsPerSecond: readThreshold, WritesPerSecond: writeThreshold,
			SustainFor: d(time.Second), Cooldown: d(30 * time.Second), HysteresisPercent: 20},
		Capacity: v1alpha1.Capacity{PerShardWritesPerSecond: writeThreshold, PerShardReadsPerSecond: perShardReads, HeadroomPercent: 25},
		Mitigations: v1alpha1.Mitigations{
			Coalesce:     v1alpha1.Coalesce{Enabled: on},
			LocalCache:   v1alpha1.LocalCache{Enabled: on, TTL: d(time.Second), JitterPercent: 10},
			Replicate:    v1alpha1.Replicate{Enabled: on, MaxReplicas: maxReplicas},
			Split:        v1alpha1.Split{Enabled: on, MaxShards: 4, Epoch: d(2 * time.Second)},
			PreAggregate: v1alpha1.PreAggregate{Enabled: on},
			// Only the list q:<node> is shed: the other keys' moves bring
			// them within capacity, or pre-aggregation's count would lose
			// the shed increments.
			Shed: v1alpha1.Shed{Enabled: on, Exclude: []string{"hot:*", "ctr:*", "warm:*"}},
			// The master's replica, read every 250 ms for its lag.
			ReplicaReads: v1alpha1.ReplicaReads{Enabled: on, Addresses: []string{replica}, LagCheckInterval: d(250 * time.Millisecond)},
		},
		Schedules: []v1alpha1.Schedule{sched},
	}
	v1alpha1.SetDefaults(&p.Spec)
	if err := cp.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), p) })
}

// createPod registers the node's pod as the injector of the sidecar's
// release writes it (this release's labels the sidecar's version, the
// previous one's did not), with the sidecar's address (127.0.0.1:
// procstack.StartSidecar).
func createPod(t *testing.T, cp *controlplane.ControlPlane, policy, nodeName, tag string, labelled bool) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{v1alpha1.LabelPolicy: policy}
	if labelled {
		labels[v1alpha1.LabelSidecarVersion] = tag
	}
	po := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "app-" + nodeName, Labels: labels},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "app"},
			{Name: webhook.ProxyContainerName, Image: "ghcr.io/heatsink-dev/heatsink:" + tag}}},
	}
	if err := cp.Client.Create(ctx, po); err != nil {
		t.Fatal(err)
	}
	po.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
	if err := cp.Client.Status().Update(ctx, po); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), po) })
}

// entry is key's entry in the policy's published table (nil if none).
func entry(t *testing.T, cp *controlplane.ControlPlane, policy, key string) *routing.Entry {
	t.Helper()
	_, e, err := tableEntry(cp, policy, key)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// tableEntry is entry for a goroutine of its own, with the table: it
// returns the table's error (nils when no table is published yet).
func tableEntry(cp *controlplane.ControlPlane, policy, key string) (*routing.Table, *routing.Entry, error) {
	cm := &corev1.ConfigMap{}
	if err := cp.Client.Get(context.Background(), crclient.ObjectKey{Namespace: namespace, Name: routing.ConfigMapName(policy)}, cm); err != nil {
		return nil, nil, nil
	}
	tbl, err := routing.Parse([]byte(cm.Data[routing.ConfigMapKey]))
	if err != nil {
		return nil, nil, fmt.Errorf("the published table: %w", err)
	}
	for i := range tbl.Entries {
		if tbl.Entries[i].Key == key {
			return tbl, &tbl.Entries[i], nil
		}
	}
	return tbl, nil, nil
}

// redisCalls is how many calls of the commands Redis has served (INFO
// commandstats).
func redisCalls(t *testing.T, c *redis.Client, cmds ...string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, l := range strings.Split(info, "\n") {
		for _, cmd := range cmds {
			if rest, ok := strings.CutPrefix(l, "cmdstat_"+cmd+":calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				sum += n
			}
		}
	}
	return sum
}
