package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/routing"
)

// redisFlows: a Redis that stalls holds one worker only, and replicas are
// filled again once the table has reached the sidecars.
func redisFlows(t *testing.T, env *flowEnv) {
	ctx, rc, stall, newFlow, withRedis := env.ctx, env.rc, env.stall, env.newFlow, env.withRedis
	t.Run("a stalled Redis holds one worker, not the table nor the other policies", func(t *testing.T) {
		f := newFlow(t)
		f.policy("stalled", func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target.Addresses = []string{stall.addr}
			p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
		})
		f.report("stalled", "n1", cand("page:stalled", 100000, 0))
		// A node agent hosting one of the policy's pods, following the
		// hub's stream as a real one does.
		f.hub.UpsertPod(f.ns+"/stalled-agent", "agent-stalled", agentlink.Pod{IP: podIP("agent-stalled"), Policy: f.ns + "/stalled"})
		agent := followHub(t, f.hub, "agent-stalled")
		pending(f, "stalled")
		f.step(2*time.Second, "stalled")
		f.tableUntil("replicated key published before its fill", "stalled", func(tbl *routing.Table) bool {
			e := tbl.Lookup("page:stalled")
			return e != nil && e.Replicate != nil
		})
		f.eventually("the fill stuck in Redis", func() error {
			if stall.accepted() == 0 {
				return fmt.Errorf("no connection to the stalled Redis yet")
			}
			return nil
		})
		// The node agents, which the sidecars follow, hold the table while
		// the fill still waits on Redis.
		f.eventually("the table pushed to the node agent before the fill ends", func() error {
			tbl := agent.table(f.ns + "/stalled")
			if tbl == nil || tbl.Lookup("page:stalled") == nil {
				return fmt.Errorf("the agent holds %+v", tbl)
			}
			return nil
		})
		// While that fill waits, another policy is decided and published.
		f.policy("other")
		f.report("other", "n1", cand("likes:other", 0, 50000))
		pending(f, "other")
		f.step(2*time.Second, "other")
		f.tableUntil("other policy published", "other", func(tbl *routing.Table) bool { e := tbl.Lookup("likes:other"); return e != nil && e.Split != nil })
		// The stalled pass had not finished: it would have written
		// Degraded/RedisUnavailable.
		if c := meta.FindStatusCondition(f.status("stalled").Conditions, v1alpha1.ConditionDegraded); c != nil && c.Reason == v1alpha1.ReasonRedisUnavailable {
			t.Fatalf("stalled pass finished before the other policy was published: %+v", c)
		}
		stall.release()
		f.eventually("the stalled policy degrades, with a Warning Event", warningEvent(f, v1alpha1.ReasonRedisUnavailable))
		del(f, "stalled")
		f.eventually("stalled policy gone", gone(f, "stalled"))
	})

	t.Run("replicas of a policy of database 2 are filled in database 2", func(t *testing.T) {
		f := newFlow(t)
		rc2 := redis.NewClient(&redis.Options{Addr: env.srv.Addr, DB: 2})
		defer rc2.Close()
		rc2.Set(ctx, "page:db2", "db2", 0)
		rc.Set(ctx, "page:db2", "db0", 0)
		f.policy("fill-db2", withRedis, func(p *v1alpha1.HotKeyPolicy) {
			p.Spec.Target.Database = 2
			p.Spec.Mitigations.Replicate.Enabled = ptr.To(true)
		})
		f.report("fill-db2", "n1", cand("page:db2", 100000, 0))
		pending(f, "fill-db2")
		f.step(2*time.Second, "fill-db2")
		f.eventually("replicas filled in database 2 from database 2's value", func() error {
			tbl, _, err := f.table("fill-db2")
			if err != nil {
				return err
			}
			e := tbl.Lookup("page:db2")
			if e == nil || e.Replicate == nil {
				return fmt.Errorf("entries %+v", tbl.Entries)
			}
			for _, k := range routing.ReplicaKeys("page:db2", int(e.Replicate.Replicas)) {
				if v, err := rc2.Get(ctx, k).Result(); v != "db2" {
					return fmt.Errorf("db 2 replica %q = %q (%v), want db2", k, v, err)
				}
				if n := rc.Exists(ctx, k).Val(); n != 0 {
					return fmt.Errorf("replica %q written in database 0", k)
				}
			}
			return nil
		})
	})

	t.Run("replicas are filled again once the table has reached the sidecars", func(t *testing.T) {
		f := newFlow(t)
		rc.Set(ctx, "page:refill", "v1", 0)
		f.policy("refill", withRedis, func(p *v1alpha1.HotKeyPolicy) { p.Spec.Mitigations.Replicate.Enabled = ptr.To(true) })
		f.report("refill", "n1", cand("page:refill", 100000, 0))
		pending(f, "refill")
		f.step(2*time.Second, "refill")
		replicas := func(want string) func() error {
			return func() error {
				tbl, _, err := f.table("refill")
				if err != nil {
					return err
				}
				e := tbl.Lookup("page:refill")
				if e == nil || e.Replicate == nil {
					return fmt.Errorf("entries %+v", tbl.Entries)
				}
				for _, k := range routing.ReplicaKeys("page:refill", int(e.Replicate.Replicas)) {
					if v, err := rc.Get(ctx, k).Result(); v != want {
						return fmt.Errorf("replica %q = %q (%v), want %q", k, v, err, want)
					}
				}
				return nil
			}
		}
		f.eventually("replicas filled", replicas("v1"))
		// A write through the previous table, which sidecars may still use
		// until the margin has passed, reaches the base key only.
		rc.Set(ctx, "page:refill", "v2", 0)
		f.clk.Step(10 * time.Second) // the margin
		f.report("refill", "n1", cand("page:refill", 100000, 0))
		f.eventually("replicas refilled", replicas("v2"))
	})
}

// stallServer accepts Redis connections and never answers until released:
// a Redis that hangs rather than refuses.
type stallServer struct {
	addr string
	ln   net.Listener
	mu   sync.Mutex
	// conns are the accepted connections, closed on release.
	conns    []net.Conn
	n        int
	released bool
}

// hubFollower is a node agent's end of the hub's stream, reduced to the
// newest routing table of each policy.
type hubFollower struct {
	mu     sync.Mutex
	tables map[string]*routing.Table
}

func (a *hubFollower) table(policy string) *routing.Table {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tables[policy]
}

// followHub opens the hub's stream as node's agent and keeps the routing
// tables it pushes, until the test ends.
func followHub(t *testing.T, h *hub.Hub, node string) *hubFollower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := h.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+agentlink.PathWatch+"?node="+node, nil)
	if err != nil {
		t.Fatal(err)
	}
	agentlink.SetToken(req, "test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("hub stream: %s", resp.Status)
	}
	a := &hubFollower{tables: map[string]*routing.Table{}}
	go func() {
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev agentlink.Event
			if dec.Decode(&ev) != nil {
				return
			}
			if ev.Type != agentlink.TypeRouting || ev.Routing == nil {
				continue
			}
			if tbl, err := routing.Parse(ev.Routing.Table); err == nil {
				a.mu.Lock()
				a.tables[ev.Routing.Policy] = tbl
				a.mu.Unlock()
			}
		}
	}()
	return a
}

func newStallServer(t *testing.T) *stallServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stallServer{addr: ln.Addr().String(), ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.n++
			if s.released {
				_ = c.Close()
			} else {
				s.conns = append(s.conns, c)
				go func() { _, _ = io.Copy(io.Discard, c) }() // read, never answer
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.release(); _ = ln.Close() })
	return s
}

func (s *stallServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// release closes every connection: the stalled ops fail, later ones too.
func (s *stallServer) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// dialer dials the stall server with no per-op timeout and no retry, so an
// op there waits for the pass deadline (or the release), and every other
// address with next.
func (s *stallServer) dialer(next RedisDialer) RedisDialer {
	return func(target v1alpha1.RedisTarget, creds Credentials) (redis.UniversalClient, error) {
		if len(target.Addresses) == 1 && target.Addresses[0] == s.addr {
			return redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1,
				ContextTimeoutEnabled: true}), nil
		}
		return next(target, creds)
	}
}
