package controllers

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// commandCalls reads how many times a real server ran cmd ("memory|usage")
// and refused it (INFO commandstats: calls, rejected_calls).
func commandCalls(t *testing.T, c *redis.Client, cmd string) (calls, rejected int) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_` + regexp.QuoteMeta(cmd) + `:calls=(\d+),.*rejected_calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0, 0
	}
	calls, _ = strconv.Atoi(m[1])
	rejected, _ = strconv.Atoi(m[2])
	return calls, rejected
}

// sizesFlows: the manager confirms big keys with MEMORY USAGE on a real
// Redis at a bounded rate, on the fake clock.
func sizesFlows(t *testing.T, env *flowEnv) {
	t.Run("big keys confirmed with MEMORY USAGE at a bounded rate; a refusal raises an Event", func(t *testing.T) {
		f := env.newFlow(t)
		srv := redistest.Standalone(t)
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = rc.Close() })
		ctx := f.ctx
		// A 5 MB hash that the node saw read one field at a time (1,000
		// bytes a reply), a 20 MiB string, a key deleted since it was seen,
		// and small keys: more keys listed (hub.MaxBigKeys, 32) than the
		// bucket grants over the flow (24).
		const fields, fieldBytes, strBytes = 5000, 1000, 20 << 20
		args := make([]any, 0, 2*fields)
		for i := range fields {
			args = append(args, fmt.Sprintf("f%d", i), strings.Repeat("h", fieldBytes))
		}
		if err := rc.HSet(ctx, "sz:hash", args...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.Set(ctx, "sz:str", strings.Repeat("s", strBytes), 0).Err(); err != nil {
			t.Fatal(err)
		}
		big := []agentlink.KeySize{{Key: "sz:str", Bytes: strBytes}, {Key: "sz:gone", Bytes: 2 << 20}, {Key: "sz:hash", Bytes: fieldBytes}}
		for i := range 40 {
			k := fmt.Sprintf("sz:small:%02d", i)
			rc.Set(ctx, k, "0123456789", 0)
			big = append(big, agentlink.KeySize{Key: k, Bytes: 10})
		}
		f.policy("sz", func(p *v1alpha1.HotKeyPolicy) { p.Spec.Target.Addresses = []string{srv.Addr} })
		id := f.ns + "/sz"
		key := client.ObjectKey{Namespace: f.ns, Name: "sz"}
		// pass sends the node's summary and makes a pass at the clock's
		// time; step waits until a pass at that time asked the bucket (keys
		// wait to be measured) and no measure runs, sending the pod and
		// the summary again meanwhile (the hub drops both until a pass told
		// it of the new policy).
		// poke, unlike f.poke, changes the policy at every call, so each
		// call makes a pass even at the same instant of the fake clock.
		poke := func() {
			f.modify("sz", func(p *v1alpha1.HotKeyPolicy) { p.Annotations["test/poke-seq"] = strconv.FormatUint(f.seq, 10) })
		}
		send := func() {
			f.hub.UpsertPod(id+"-n1", "n1", agentlink.Pod{IP: podIP("n1"), Policy: id})
			f.seq++
			f.hub.Ingest(&agentlink.Summary{Node: "n1", Session: 1, Seq: f.seq, Policies: []agentlink.PolicySummary{{Policy: id, BigKeys: big}}})
			poke()
		}
		pass := func(d time.Duration) {
			t.Helper()
			f.clk.Step(d)
			send()
		}
		step := func(d time.Duration) {
			t.Helper()
			f.clk.Step(d)
			now := f.clk.Now()
			f.eventually("a pass at "+now.String(), func() error {
				send()
				var at time.Time
				var busy bool
				var answered int
				f.r.mem.with(key, func(m *policyMemory) {
					at, busy, answered = m.sizes.bucket.At(), m.sizes.inFlight, len(m.sizes.results)
				})
				// Every listed key answered: nothing is due, the bucket is
				// not asked.
				if !at.Equal(now) && answered < hub.MaxBigKeys || busy {
					return fmt.Errorf("bucket at %v, in flight %v, %d keys answered", at, busy, answered)
				}
				return nil
			})
		}
		o := f.r.sizeOptions()
		began := f.clk.Now()
		step(0)
		for range 50 {
			step(time.Second)
			f.seq++
			poke() // more passes at the same instant grant nothing more
		}
		elapsed := f.clk.Since(began)
		calls, _ := commandCalls(t, rc, "memory|usage")
		bound := int(float64(o.PerInterval) * (1 + elapsed.Seconds()/o.Interval.Seconds()))
		t.Logf("MEMORY USAGE calls %d over %v of fake time, bound %d (%d keys a %v)", calls, elapsed, bound, o.PerInterval, o.Interval)
		if calls > bound || calls < bound-2 {
			t.Fatalf("redis ran %d MEMORY USAGE over %v, want the bucket's %d (−2 at most)", calls, elapsed, bound)
		}

		var rep v1alpha1.HotKeyReport
		f.eventually("the report shows the confirmed sizes", func() error {
			pass(time.Second)
			if err := f.c.Get(ctx, key, &rep); err != nil {
				return err
			}
			b := rep.Spec.BigKeys
			if len(b) < 3 || b[0].Key != "sz:str" || b[1].Key != "sz:hash" || b[1].MemoryBytes == 0 || b[len(b)-1].Key != "sz:gone" {
				return fmt.Errorf("bigKeys %+v", b[:min(3, len(b))])
			}
			return nil
		})
		b := rep.Spec.BigKeys
		str, hash, gone := b[0], b[1], b[len(b)-1]
		t.Logf("confirmed: sz:str %d bytes (payload %d), sz:hash %d bytes (payload %d, %d observed)", str.MemoryBytes, strBytes, hash.MemoryBytes, fields*fieldBytes, hash.ValueBytes)
		within := func(k v1alpha1.BigKey, truth int64) {
			if k.MemoryBytes < truth || float64(k.MemoryBytes) > 1.5*float64(truth) || !k.Big {
				t.Errorf("%+v: want memoryBytes within [1, 1.5] × %d, big", k, truth)
			}
		}
		within(str, strBytes)
		within(hash, fields*fieldBytes)
		if !gone.Missing || gone.Big || gone.MemoryBytes != 0 {
			t.Errorf("the deleted key: %+v, want missing, not big, listed last", gone)
		}
		f.eventually("a BigKeys Event names the hash, big once confirmed", func() error {
			return eventMessage(f, ReasonBigKeys, `"sz:hash"`)
		})

		// The manager's user loses +memory|usage: an Event names it, the
		// report stays, nothing crashes; refusals are bounded as calls are.
		if err := rc.Do(ctx, "ACL", "SETUSER", "nomem", "reset", "on", ">pw", "~*", "+@all", "-memory|usage").Err(); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{}
		sec.Namespace, sec.Name = f.ns, "nomem"
		sec.Data = map[string][]byte{"username": []byte("nomem"), "password": []byte("pw")}
		if err := f.c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		f.modify("sz", func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "nomem"}
		})
		// Every answer stale: every key is due again.
		step(o.TTL)
		for range 20 {
			step(time.Second)
		}
		f.eventually("a BigKeysUnconfirmed Event names memory|usage", func() error {
			return eventMessage(f, ReasonBigKeysUnconfirmed, "'memory|usage'")
		})
		// The bucket bounds attempts, answered or refused, over the whole
		// flow; a refusal stops its batch, so each costs its batch's tokens.
		all, rejected := commandCalls(t, rc, "memory|usage")
		elapsed = f.clk.Since(began)
		bound = int(float64(o.PerInterval) * (1 + elapsed.Seconds()/o.Interval.Seconds()))
		t.Logf("over the flow, %v of fake time: %d MEMORY USAGE run, %d refused, bound %d", elapsed, all, rejected, bound)
		if rejected < 1 || all+rejected > bound {
			t.Errorf("%d run and %d refused over %v, want at least one refused and at most %d attempts", all, rejected, elapsed, bound)
		}
		if err := f.c.Get(ctx, key, &rep); err != nil || len(rep.Spec.BigKeys) == 0 {
			t.Fatalf("the report after refusals: %+v, %v", rep.Spec.BigKeys, err)
		}
	})
}

// eventMessage says whether an Event with reason and a message containing
// part was emitted in the flow's namespace.
func eventMessage(f *flow, reason, part string) error {
	var evs eventsv1.EventList
	if err := f.c.List(f.ctx, &evs, client.InNamespace(f.ns)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Reason == reason && strings.Contains(e.Note, part) {
			return nil
		}
	}
	return fmt.Errorf("no %s Event naming %s among %d", reason, part, len(evs.Items))
}
