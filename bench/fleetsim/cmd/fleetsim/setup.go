package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

// The run's steps around runOne: objects created before it, its progress
// and troubles, and the routing probe after the phases.

// setup creates the namespaces, the policy and, for designs that learn
// pods from the API server, one Pod per simulated sidecar.
func setup(ctx context.Context, cp *controlplane.ControlPlane, tc *simproto.Config, s settings, d design, res *Result) error {
	for _, ns := range []string{tc.Namespace, s.leNamespace} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	// A Redis address where nothing listens: the hot event needs no Redis
	// work (no replicas; a first split is only announced), and anything
	// else fails fast.
	redisPort, err := freePort()
	if err != nil {
		return err
	}
	for k := range tc.Policies {
		pol := &v1alpha1.HotKeyPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: tc.PolicyName(k)},
			Spec: v1alpha1.HotKeyPolicySpec{
				Mode:        v1alpha1.ModeEnforce, // the fleet publishes what it decides
				Target:      v1alpha1.RedisTarget{Addresses: []string{fmt.Sprintf("127.0.0.1:%d", redisPort)}},
				Thresholds:  v1alpha1.Thresholds{ReadsPerSecond: s.reads, WritesPerSecond: s.writes, SustainFor: metav1.Duration{Duration: s.sustainFor}},
				Mitigations: v1alpha1.Mitigations{Split: v1alpha1.Split{Enabled: ptr.To(true)}},
			},
		}
		v1alpha1.SetDefaults(&pol.Spec)
		if err := cp.Client.Create(ctx, pol); err != nil {
			return fmt.Errorf("policy %s: %w", pol.Name, err)
		}
	}
	if d.tokenSecret != "" {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.leNamespace, Name: d.tokenSecret},
			Data:       map[string][]byte{"token": []byte(tc.Token)},
		}
		if err := cp.Client.Create(ctx, sec); err != nil {
			return fmt.Errorf("fleet token Secret: %w", err)
		}
	}
	if d.pods {
		logf("fleetsim: %s N=%d: creating %d pods", d.name, tc.Nodes, tc.Sidecars())
		if err := createPods(ctx, cp, tc); err != nil {
			return fmt.Errorf("pods: %w", err)
		}
	}
	return nil
}

// createPods creates one Running pod per simulated sidecar, on its node,
// with its address (simproto.SidecarIP), labelled and annotated with the
// policy it was injected for. 16 at a time.
func createPods(ctx context.Context, cp *controlplane.ControlPlane, tc *simproto.Config) error {
	type job struct{ i, j int }
	jobs := make(chan job)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range jobs {
				ip := simproto.SidecarIP(jb.i, jb.j)
				policy := tc.PolicyName(tc.SidecarPolicy(jb.j))
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{
						Namespace: tc.Namespace, Name: fmt.Sprintf("app-%s-%d", simproto.NodeName(jb.i), jb.j),
						Labels:      map[string]string{"app": "fleetsim", v1alpha1.LabelPolicy: policy},
						Annotations: map[string]string{"heatsink.dev/inject": policy},
					},
					Spec: corev1.PodSpec{NodeName: simproto.NodeName(jb.i), Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app"}}},
				}
				err := cp.Client.Create(ctx, p)
				if err == nil {
					p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
					err = cp.Client.Status().Update(ctx, p)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range tc.Nodes {
		for j := range tc.SidecarsPerNode {
			select {
			case jobs <- job{i, j}:
			case err := <-errs:
				close(jobs)
				wg.Wait()
				return err
			}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// fmtProgress renders a progress event's counters, sorted by name.
func fmtProgress(p map[string]float64) string {
	if len(p) == 0 {
		return "no progress reported yet"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, fmt.Sprintf("%s=%g", k, p[k]))
	}
	return strings.Join(parts, " ")
}

// troubles lists the node simulator's counters that say something went
// wrong (restarts, errors, drops, losses) and are not zero: the table's
// numbers are read in their light.
func troubles(stats, progress map[string]float64) []string {
	m := stats
	if m == nil {
		m = progress
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		bad := false
		for _, w := range []string{"restart", "error", "dropped", "lost", "refused"} {
			bad = bad || strings.Contains(k, w)
		}
		if bad && m[k] > 0 {
			out = append(out, fmt.Sprintf("node simulator: %s = %g", k, m[k]))
		}
	}
	if gap := m[maxTickGap]; gap > maxTickGapNoted.Seconds() {
		out = append(out, fmt.Sprintf("node simulator: a simulated node fell %.1f s behind its traffic (%s): "+
			"the machine could not run this row in real time, and its times are late by up to that", gap, maxTickGap))
	}
	return out
}

// maxTickGap is the node simulator's stat of how far its most starved node
// fell behind (simproto.TrafficStats.MaxGap); over maxTickGapNoted it is a
// note: the simulation, not only heatsink, was late.
const (
	maxTickGap      = "max_tick_gap_seconds"
	maxTickGapNoted = time.Second
)

// waitDone waits (bounded) for the node simulator's done event, or the end
// of its output.
func waitDone(store *eventStore, bound time.Duration, seen func(simproto.Event)) {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		select {
		case e, ok := <-store.notify:
			if !ok || e.Event == simproto.EventDone {
				return
			}
			seen(e)
		case <-t.C:
			return
		}
	}
}

// lateness says when the node simulator's traffic changed more than a
// second after the schedule: a starved simulator offers its traffic late
// (it catches up), which the API rates of the phases then blur.
func lateness(readyAt time.Time, phaseAt map[string]time.Time, tc simproto.Config) []string {
	var out []string
	for _, p := range []struct {
		name string
		want time.Duration
	}{{simproto.PhaseHot, tc.HotStart}, {simproto.PhaseRest, tc.HotStart + tc.HotDuration}} {
		at, ok := phaseAt[p.name]
		if !ok {
			out = append(out, fmt.Sprintf("node simulator: no %s phase event", p.name))
			continue
		}
		if late := at.Sub(readyAt.Add(p.want)); late > time.Second {
			out = append(out, fmt.Sprintf("node simulator: %s phase began %.1f s late", p.name, late.Seconds()))
		}
	}
	return out
}

// scrapeHubPush reads the manager's routing push timing from its metrics
// at addr; nil if it serves none over plain HTTP.
func scrapeHubPush(ctx context.Context, addr string) *HubPush {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	hp, _ := parseHubPush(resp.Body)
	return hp
}

// phaseSteady names both the mark at the warm-up's midpoint and
// kube-apiserver's view from there to the hot event: the fleet at rest.
const phaseSteady = "steady"

// ProbeKey is the key the routing probe schedules.
const ProbeKey = "fleetsim:probe"

// probe makes one routing change after the phases and times its fan-out:
// it adds to the (first) policy a schedule that covers now, for ProbeKey,
// so the manager publishes a table holding it (heatsink's own path,
// whatever the design), then waits (at most 30 s) until every sidecar of
// that policy accepted that version or a later one. Its API requests come after the last /metrics
// read.
func probe(ctx context.Context, cp *controlplane.ControlPlane, tc *simproto.Config, versions *versionWatch, store *eventStore) *FanOut {
	f := &FanOut{}
	var pol v1alpha1.HotKeyPolicy
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: tc.Policy}, &pol); err != nil {
		return f
	}
	start := metav1.NewTime(time.Now().Add(-time.Minute))
	pol.Spec.Schedules = append(pol.Spec.Schedules, v1alpha1.Schedule{
		Name: "fleetsim-probe", Start: &start, Duration: metav1.Duration{Duration: time.Hour},
		Keys: []string{ProbeKey}, Mitigation: v1alpha1.ScheduledMitigation{Coalesce: true},
	})
	if err := cp.Client.Update(ctx, &pol); err != nil {
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var pv *seenVersion
	for {
		if pv == nil {
			for _, v := range versions.snapshot() {
				if slices.Contains(v.Keys, ProbeKey) {
					pv = &v
					break
				}
			}
		}
		if pv != nil {
			store.mu.Lock()
			events := eventsOf(append([]sidecarEvent(nil), store.routing...), 0, tc)
			store.mu.Unlock()
			*f = probeFanOut(*pv, events)
			if f.LastReached >= sidecarsOf(0, tc) {
				return f
			}
		}
		select {
		case <-ctx.Done():
			return f
		case <-t.C:
		}
	}
}

// probeFanOut times the acceptances of version v (or, for a sidecar that
// skipped it, of its first later version) against when the orchestrator saw
// v; LastReached counts the sidecars that got there.
func probeFanOut(v seenVersion, events []sidecarEvent) FanOut {
	first := firstAccepted(events, v.Version)
	ms := make([]float64, 0, len(first))
	for _, t := range first {
		ms = append(ms, float64(t.Sub(v.At))/float64(time.Millisecond))
	}
	slices.Sort(ms)
	f := FanOut{Versions: 1, Samples: len(ms), LastVersion: v.Version, LastReached: len(ms),
		P50Ms: percentile(ms, 0.5), P99Ms: percentile(ms, 0.99)}
	if len(ms) > 0 {
		f.MaxMs = ms[len(ms)-1]
	}
	return f
}
