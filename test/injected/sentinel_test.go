package injected

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/webhook"
)

// sentinelMonRules are the rules Redis' documentation gives the ACL user a
// Sentinel authenticates to the data nodes as (sentinel auth-user).
var sentinelMonRules = []string{"allchannels", "+multi", "+slaveof", "+ping", "+exec", "+subscribe", "+config|rewrite",
	"+role", "+publish", "+info", "+client|setname", "+client|kill", "+script|kill"}

// secured is a Sentinel deployment with every password production sets:
// requirepass (admin) and the application's ACL user on the master and
// replicas, an ACL user the Sentinels monitor them as (auth-user,
// auth-pass), and requirepass on the Sentinels (sentinel-pass between
// them).
type secured struct {
	*redisproc.Sentinel
	appPassword, sentinelPassword string
}

func startSecured(t *testing.T) *secured {
	t.Helper()
	h := redistest.Sentinel(t, redisproc.SentinelOptions{Replicas: 1, Sentinels: 3,
		Password: "admin-pw", SentinelPassword: "sentinel-pw-1"})
	s := &secured{Sentinel: h, appPassword: "app-pw-1", sentinelPassword: "sentinel-pw-1"}
	for _, d := range h.Data {
		s.data(t, d.Addr, "ACL", "SETUSER", "app", "on", ">"+s.appPassword, "~*", "&*", "+@all")
		s.data(t, d.Addr, append([]string{"ACL", "SETUSER", "sentinel-mon", "on", ">mon-pw"}, sentinelMonRules...)...)
	}
	for _, x := range h.Sentinels {
		s.sentinel(t, x.Addr, "SENTINEL", "SET", h.Opts.MasterName, "auth-user", "sentinel-mon", "auth-pass", "mon-pw")
	}
	// The Sentinels reconnect to the data nodes as sentinel-mon.
	eventually.Succeeds(t, 20*time.Second, func() error {
		for _, d := range h.Data {
			out, err := h.DataCommand(d.Addr, "CLIENT", "LIST")
			if err != nil {
				return err
			}
			if n := strings.Count(out, "user=sentinel-mon"); n < len(h.Sentinels) {
				return fmt.Errorf("%s: %d connections of sentinel-mon, want one per Sentinel at least", d.Addr, n)
			}
		}
		return nil
	})
	return s
}

func (s *secured) data(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := s.DataCommand(addr, args...); err != nil {
		t.Fatal(err)
	}
}

func (s *secured) sentinel(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := s.SentinelCommand(addr, args...); err != nil {
		t.Fatal(err)
	}
}

// sentinelPolicy is a HotKeyPolicy whose target is s, with the Redis and
// the Sentinel credentials in Secrets.
func sentinelPolicy(s *secured) *v1alpha1.HotKeyPolicy {
	return &v1alpha1.HotKeyPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "catalogue"},
		Spec: v1alpha1.HotKeyPolicySpec{Target: v1alpha1.RedisTarget{
			Sentinel: &v1alpha1.RedisSentinel{
				Addresses: s.SentinelAddrs(), MasterName: s.Opts.MasterName,
				CredentialsSecretRef: &corev1.LocalObjectReference{Name: "sentinel-auth"},
			},
			CredentialsSecretRef: &corev1.LocalObjectReference{Name: "redis-auth"},
		}},
	}
}

// writer SETs keys w:<n> through the sidecar with a go-redis client in its
// default configuration (a SET of its own key is safe to retry), each
// followed by WAIT 1 (one replica has it), and keeps the keys whose SET was
// acknowledged, and those of them a replica had too.
type writer struct {
	mu sync.Mutex
	// acked: the SET was acknowledged; replicated: and its WAIT counted a
	// replica.
	acked, replicated []string
	errs              map[string]int
	n                 int
}

func (w *writer) run(ctx context.Context, c *redis.Client, maxOps int) {
	for i := 0; i < maxOps && ctx.Err() == nil; i++ {
		key := "w:" + strconv.Itoa(i)
		err := c.Set(context.Background(), key, i, 0).Err()
		var replicas int64
		if err == nil {
			replicas, _ = c.Wait(context.Background(), 1, time.Second).Result()
		}
		w.mu.Lock()
		w.n++
		if err == nil {
			w.acked = append(w.acked, key)
			if replicas >= 1 {
				w.replicated = append(w.replicated, key)
			}
		} else {
			msg := err.Error()
			if len(msg) > 60 {
				msg = msg[:60]
			}
			w.errs[msg]++
		}
		w.mu.Unlock()
	}
}

func (w *writer) replicatedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.replicated)
}

// failover fails the master over under the writer's load and checks that
// the sidecar serves on the new master and that every write it
// acknowledged is there. It returns the new master.
func failover(t *testing.T, s *secured, app *redis.Client) string {
	t.Helper()
	old, err := s.Master()
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{errs: map[string]int{}}
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, app, 200_000) }()
	eventually.True(t, 20*time.Second, "writes flow through the sidecar", func() bool { return w.replicatedCount() > 200 })
	replicasReady(t, s)
	start := time.Now()
	newMaster, err := s.Failover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar writes on the new master: keys acknowledged from now on
	// are there.
	before := w.replicatedCount()
	eventually.True(t, 30*time.Second, "writes acknowledged and replicated after the failover", func() bool { return w.replicatedCount() > before+200 })
	stop()
	<-done
	direct := redis.NewClient(&redis.Options{Addr: newMaster, Password: s.Opts.Password})
	defer direct.Close()
	missing := func(keys []string) int {
		lost := 0
		for i := 0; i < len(keys); i += 500 {
			batch := keys[i:min(i+500, len(keys))]
			n, err := direct.Exists(context.Background(), batch...).Result()
			if err != nil {
				t.Fatal(err)
			}
			lost += len(batch) - int(n)
		}
		return lost
	}
	lostAcked, lostReplicated := missing(w.acked), missing(w.replicated)
	t.Logf("failover %s -> %s (Sentinels agreed, old master resynchronised) in %v; %d SETs, %d acknowledged (%d of them not on the new master), %d replicated by WAIT 1; errors %v",
		old, newMaster, time.Since(start).Round(time.Millisecond), w.n, len(w.acked), lostAcked, len(w.replicated), w.errs)
	// Redis replicates asynchronously: a SET the old master acknowledged
	// and had not yet sent its replica when the replica was promoted is
	// lost, whatever the sidecar does (the fence only stops it from
	// sending more to the old master; docs/install.md). One a replica had
	// (WAIT) is never lost.
	if lostReplicated > 0 {
		t.Errorf("%d of %d SETs a replica had (WAIT 1) are not on the new master %s", lostReplicated, len(w.replicated), newMaster)
	}
	if role, err := direct.Do(context.Background(), "ROLE").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("%s ROLE %v %v", newMaster, role, err)
	}
	return newMaster
}

// replicasReady waits until every Sentinel sees every replica linked to
// the master with no link-down time: a Sentinel elects only such a replica
// (a link down longer than 10 × down-after-milliseconds in its last INFO
// of the replica disqualifies it), and a forced failover with no replica
// to elect is aborted and not retried. Right after a failover, the old
// master's INFO as a Sentinel last read it may still show its link down.
func replicasReady(t *testing.T, s *secured) {
	t.Helper()
	eventually.Succeeds(t, 30*time.Second, func() error {
		for _, x := range s.Sentinels {
			out, err := s.Sentinel.SentinelCommand(x.Addr, "SENTINEL", "REPLICAS", s.Opts.MasterName)
			if err != nil {
				return err
			}
			lines := strings.Split(out, "\n")
			n := 0
			for i := 0; i+1 < len(lines); i += 2 {
				switch f, v := lines[i], lines[i+1]; {
				case f == "flags" && v != "slave", f == "master-link-status" && v != "ok", f == "master-link-down-time" && v != "0":
					return fmt.Errorf("sentinel %s: a replica has %s %s", x.Addr, f, v)
				case f == "flags":
					n++
				}
			}
			if n != s.Opts.Replicas {
				return fmt.Errorf("sentinel %s knows %d ready replicas, want %d", x.Addr, n, s.Opts.Replicas)
			}
		}
		return nil
	})
}

// TestInjectedSidecarFollowsSentinelWithPasswords runs the sidecar as the
// injection webhook writes it (webhook.Inject on a pod of a policy whose
// target is a Sentinel set with credentials Secrets for Redis and for the
// Sentinels), as a process with that container's arguments, environment
// and mounted Secret files, against real redis-server and redis-sentinel
// processes that all require passwords: requirepass and an ACL user on
// the master and replica, requirepass on the Sentinels, auth-user and
// auth-pass for the master they monitor. The sidecar starts (its start
// time logged), serves reads and writes as the ACL user, follows a
// SENTINEL FAILOVER with every acknowledged write on the new master, and
// takes rotated Redis and Sentinel passwords from its files without a
// restart: the old passwords removed from the servers and every
// connection authenticated with them killed, it serves again and follows
// a second failover.
func TestInjectedSidecarFollowsSentinelWithPasswords(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped with -short")
	}
	s := startSecured(t)
	policy := sentinelPolicy(s)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app", Annotations: map[string]string{webhook.InjectAnnotation: policy.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	// The node agent is away (a loopback port nobody listens on) and the
	// routing ConfigMap is mounted (--inject-routing-file) but was never
	// published: the startup probe passes as soon as the proxy serves.
	webhook.Inject(pod, policy, webhook.InjectorConfig{Image: "heatsink:test", NodeAgentAddress: freeAddr(t), RoutingFile: true})
	k := &kubelet{t: t, pod: pod, dirs: map[string]string{}, configMaps: map[string]map[string]string{},
		secrets: map[string]map[string]string{
			"redis-auth":    {"username": "app", "password": s.appPassword},
			"sentinel-auth": {"password": s.sentinelPassword},
		}}
	p := k.run(t, pod.Spec.InitContainers[0])
	listening, started, err := p.waitServing(context.Background(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sidecar process started -> listener open %v, startup probe 200 %v", listening.Round(time.Millisecond), started.Round(time.Millisecond))
	if strings.Contains(p.log.String(), "NOAUTH") || strings.Contains(p.log.String(), "WRONGPASS") {
		t.Errorf("the sidecar logged an authentication failure at start:\n%s", p.log.tail(2048))
	}

	// The application, a go-redis client in its default configuration.
	app := redis.NewClient(&redis.Options{Addr: p.listen})
	defer app.Close()
	ctx := context.Background()
	if err := app.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatalf("SET through the sidecar: %v", err)
	}
	if got, err := app.Get(ctx, "greeting").Result(); err != nil || got != "hello" {
		t.Fatalf("GET through the sidecar: %q %v", got, err)
	}
	first := failover(t, s, app)

	// Rotation, as an operator does it: the new password added on every
	// server, the Secrets changed (the kubelet swaps the mounted files),
	// the old password removed.
	for _, d := range s.Data {
		s.data(t, d.Addr, "ACL", "SETUSER", "app", ">app-pw-2")
	}
	for _, x := range s.Sentinels {
		s.sentinel(t, x.Addr, "ACL", "SETUSER", "default", ">sentinel-pw-2")
	}
	k.updateSecret("redis-auth", map[string]string{"username": "app", "password": "app-pw-2"})
	k.updateSecret("sentinel-auth", map[string]string{"password": "sentinel-pw-2"})
	for _, x := range s.Sentinels {
		s.sentinel(t, x.Addr, "SENTINEL", "CONFIG", "SET", "sentinel-pass", "sentinel-pw-2")
		s.sentinel(t, x.Addr, "ACL", "SETUSER", "default", "<sentinel-pw-1")
	}
	s.Opts.SentinelPassword = "sentinel-pw-2"
	for _, d := range s.Data {
		s.data(t, d.Addr, "ACL", "SETUSER", "app", "<app-pw-1")
	}
	// Every connection authenticated with an old password goes: the
	// sidecar's to the data nodes (user app) and to the Sentinels (its
	// queries and its subscriptions).
	for _, d := range s.Data {
		s.data(t, d.Addr, "CLIENT", "KILL", "USER", "app")
	}
	for _, x := range s.Sentinels {
		s.sentinel(t, x.Addr, "CLIENT", "KILL", "TYPE", "pubsub")
		s.sentinel(t, x.Addr, "CLIENT", "KILL", "TYPE", "normal")
	}
	for _, old := range []struct{ addr, user, pw string }{{first, "app", "app-pw-1"}, {s.Sentinels[0].Addr, "", "sentinel-pw-1"}} {
		c := redis.NewClient(&redis.Options{Addr: old.addr, Username: old.user, Password: old.pw})
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatalf("%s still accepts the old password: the checks below would prove nothing", old.addr)
		}
		c.Close()
	}
	eventually.Succeeds(t, 20*time.Second, func() error {
		if err := app.Set(ctx, "greeting", "rotated", 0).Err(); err != nil {
			return err
		}
		got, err := app.Get(ctx, "greeting").Result()
		if err == nil && got != "rotated" {
			err = fmt.Errorf("GET greeting = %q after SET rotated", got)
		}
		return err
	})
	// The Sentinels, asked and subscribed to with the new password, lead
	// the sidecar through a second failover; the ROLE check of the new
	// master uses the new Redis password.
	if second := failover(t, s, app); second == first {
		t.Fatalf("the second failover left the master at %s", second)
	}
	if strings.Contains(p.log.String(), "WRONGPASS") {
		t.Logf("the sidecar logged WRONGPASS (a connection opened while the servers and the files were being changed):\n%s", p.log.tail(2048))
	}
	select {
	case <-p.done:
		t.Fatalf("the sidecar exited: %v", p.cmd.ProcessState)
	default:
	}
}
