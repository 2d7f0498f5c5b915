// Package sentinel finds a Redis master through Redis Sentinel and follows
// it across failovers, for the sidecar: the proxy and the engine connect to
// whatever master this package names, and applications keep pointing at
// the sidecar.
//
// It follows Sentinel's client guidelines (https://redis.io/docs/latest/
// develop/reference/sentinel-clients/): every Sentinel is asked for the
// master, the address named is checked with ROLE before it is used,
// +switch-master messages say at once when the master moved, and the
// Sentinels are asked again every few seconds in case a message was lost.
//
// Every Sentinel is subscribed to, not one: measured with three Sentinels
// and SENTINEL FAILOVER, the Sentinel that leads the failover publishes
// +switch-master about three seconds after the others (once its replicas
// are reconfigured; the others learn the new master from its hello at the
// promotion), and only the leader publishes the failover's progress.
//
// The fence. Between the moment the leader promotes a replica (REPLICAOF
// NO ONE) and the moment anyone hears +switch-master, about a second, the
// old master is still reachable and still a master (Sentinel reconfigures
// it several seconds later), and every write it acknowledges then is lost
// when it resynchronises from the new master: measured, thousands of
// acknowledged INCRs of a failover under load. So when the leader
// publishes +failover-state-send-slaveof-noone for this master (one
// Sentinel tick, 50 to 100 ms, before it sends REPLICAOF NO ONE), the
// follower fences (OnFence): the sidecar stops sending anything to the old
// master, and clients get errors, until the switch (OnSwitch) or, if the
// failover is aborted, the resumption of the old master (OnSwitch with
// old == new). The fence cannot save a write the old master acknowledged
// before it and had not yet replicated when the replica was promoted:
// that loss is Redis' asynchronous replication, which min-replicas-to-write
// bounds.
//
// Sentinels are asked with SENTINEL MASTER rather than
// GET-MASTER-ADDR-BY-NAME because its reply carries the configuration
// epoch. During a failover the Sentinels disagree for up to a few seconds
// (the others learn the new configuration from the leader's hello
// messages), and the old master, still reachable, keeps answering ROLE
// with "master" until Sentinel reconfigures it, several seconds later. A
// majority vote or ROLE alone would then switch back to the old master;
// the highest epoch names the newest configuration.
package sentinel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures a Follower.
type Options struct {
	// Addrs are the Sentinels' host:port addresses.
	Addrs []string
	// MasterName is the name the Sentinels monitor the master under.
	MasterName string
	// Username and Password authenticate to the Sentinels (their own
	// requirepass or ACL user), if set.
	Username, Password string
	// Credentials, if set, replaces Username and Password: it is asked
	// at each new connection to a Sentinel, so that credentials read from
	// a mounted Secret rotate without a restart (connections already open
	// stay as they were authenticated).
	Credentials func() (username, password string)
	// DataUsername and DataPassword authenticate to the data nodes, for
	// the ROLE check.
	DataUsername, DataPassword string
	// DataCredentials, if set, replaces DataUsername and DataPassword,
	// asked at each ROLE check (each opens a connection of its own).
	DataCredentials func() (username, password string)
	// TLS, if set, is used for the Sentinels and the data nodes.
	TLS *tls.Config
	// Dialer, if set, replaces TLS: it connects to the Sentinels and the
	// data nodes (the sidecar's upstream.Dialer, whose handshakes see the
	// CA bundle as it is then; go-redis' TLSConfig keeps the one read at
	// start unless a server name is fixed).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Recheck is how often the Sentinels are asked again without a
	// +switch-master message (default 2s).
	Recheck time.Duration
	// Timeout bounds one exchange with a Sentinel or a data node
	// (default 1s).
	Timeout time.Duration
	// OnSwitch, if set, is called after the master changed, with the old
	// and new address, and after a fence with old == new when the master
	// stays (the failover was aborted).
	OnSwitch func(old, new string)
	// OnFence, if set, is called when a failover of the master is about
	// to promote a replica: nothing may be sent to master until OnSwitch.
	// Callbacks are made one at a time, from the follower's goroutines.
	OnFence func(master string)
	// Logger logs switches and unreachable Sentinels.
	Logger *slog.Logger
}

// Follower knows the current master and follows its failovers.
type Follower struct {
	opts      Options
	sentinels []*redis.SentinelClient

	mu     sync.Mutex
	master string
	epoch  int64
	// fenced: a failover is promoting a replica; fencedAt is when.
	fenced   bool
	fencedAt time.Time
	// cb serialises the callbacks.
	cb sync.Mutex

	kick chan struct{}
}

// New validates opts. It does not connect yet.
func New(opts Options) (*Follower, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("sentinel: no Sentinel address")
	}
	if opts.MasterName == "" {
		return nil, errors.New("sentinel: no master name")
	}
	for _, a := range opts.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("sentinel: address %q: %w", a, err)
		}
	}
	if opts.Recheck <= 0 {
		opts.Recheck = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Follower{opts: opts, kick: make(chan struct{}, 1)}
	for _, a := range opts.Addrs {
		f.sentinels = append(f.sentinels, redis.NewSentinelClient(&redis.Options{
			Addr: a, Username: opts.Username, Password: opts.Password, CredentialsProvider: opts.Credentials,
			TLSConfig: opts.TLS, Dialer: opts.Dialer,
			DialTimeout: opts.Timeout, ReadTimeout: opts.Timeout, WriteTimeout: opts.Timeout,
			// A Sentinel that fails is skipped, not retried: another answers.
			MaxRetries: -1, PoolSize: 2,
		}))
	}
	return f, nil
}

// Close closes the connections to the Sentinels.
func (f *Follower) Close() {
	for _, s := range f.sentinels {
		_ = s.Close()
	}
}

// Master is the current master's address ("" before Discover succeeded).
func (f *Follower) Master() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.master
}

// Discover asks the Sentinels for the master until one names a master
// that confirms its role, or ctx ends; it returns the master's address.
// Run may start after it.
func (f *Follower) Discover(ctx context.Context) (string, error) {
	delay := 50 * time.Millisecond
	for {
		addr, epoch, _, err := f.resolve(ctx)
		if err == nil {
			f.mu.Lock()
			f.master, f.epoch = addr, epoch
			f.mu.Unlock()
			return addr, nil
		}
		f.opts.Logger.Warn("no master from Sentinel yet; retrying", "master", f.opts.MasterName, "err", err, "retry_in", delay.String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("sentinel: master %q: %w (last error: %v)", f.opts.MasterName, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Run follows the master until ctx ends: it subscribes to +switch-master
// and asks the Sentinels again on every message and every Recheck.
func (f *Follower) Run(ctx context.Context) {
	for i := range f.sentinels {
		go f.subscribe(ctx, i)
	}
	tick := time.NewTicker(f.opts.Recheck)
	defer tick.Stop()
	// retry is armed when a check failed (the new master not confirmed
	// yet, or fenced while the failover runs): checks follow every 100 ms
	// until one succeeds, rather than waiting for the next tick.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-f.kick:
		case <-retry.C:
		}
		if err := f.check(ctx); err != nil && ctx.Err() == nil {
			if !errors.Is(err, errFenced) {
				f.opts.Logger.Warn("sentinel check failed", "master", f.opts.MasterName, "err", err)
			}
			retry.Reset(100 * time.Millisecond)
		}
	}
}

// errFenced keeps the checks coming (every 100 ms) while fenced.
var errFenced = errors.New("failover in progress")

// check asks the Sentinels now and switches if they name a newer master;
// while fenced, it lifts the fence on the old master once no Sentinel has
// a failover of it in progress.
func (f *Follower) check(ctx context.Context) error {
	addr, epoch, busy, err := f.resolve(ctx)
	if errors.Is(err, errFenced) {
		// The newest word is a failover in progress: fence now, should
		// the message announcing the promotion have been lost.
		f.fence()
		return err
	}
	if err != nil {
		return err
	}
	f.cb.Lock()
	defer f.cb.Unlock()
	f.mu.Lock()
	old, oldEpoch, fenced := f.master, f.epoch, f.fenced
	if addr == old || epoch < oldEpoch {
		// The same master, or an answer older than the configuration in
		// force (a Sentinel that has not heard of the failover yet).
		if !fenced {
			f.mu.Unlock()
			return nil
		}
		if busy {
			f.mu.Unlock()
			return errFenced
		}
		f.fenced = false
		since := time.Since(f.fencedAt)
		f.mu.Unlock()
		f.opts.Logger.Warn("redis failover did not happen; resuming the master", "master", f.opts.MasterName, "address", old, "fenced_for", since.String())
		if f.opts.OnSwitch != nil {
			f.opts.OnSwitch(old, old)
		}
		return nil
	}
	f.master, f.epoch, f.fenced = addr, epoch, false
	f.mu.Unlock()
	f.opts.Logger.Info("redis master switched", "master", f.opts.MasterName, "from", old, "to", addr, "config_epoch", epoch)
	if f.opts.OnSwitch != nil {
		f.opts.OnSwitch(old, addr)
	}
	return nil
}

// fence stops traffic to the master: a replica is being promoted.
func (f *Follower) fence() {
	f.cb.Lock()
	defer f.cb.Unlock()
	f.mu.Lock()
	if f.fenced || f.master == "" {
		f.mu.Unlock()
		return
	}
	f.fenced, f.fencedAt = true, time.Now()
	master := f.master
	f.mu.Unlock()
	f.opts.Logger.Info("redis failover promoting a replica; fencing the master", "master", f.opts.MasterName, "address", master)
	if f.opts.OnFence != nil {
		f.opts.OnFence(master)
	}
}

// answer is one Sentinel's view of the master.
type answer struct {
	addr  string
	epoch int64
	// busy: this Sentinel has a failover of the master in progress.
	busy bool
	err  error
}

// resolve asks every Sentinel at once for the master, takes the answer of
// the highest configuration epoch, and checks that the node it names says
// it is a master. busy reports a failover in progress at some Sentinel.
func (f *Follower) resolve(ctx context.Context) (addr string, epoch int64, busy bool, err error) {
	answers := make([]answer, len(f.sentinels))
	var wg sync.WaitGroup
	for i, s := range f.sentinels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = f.ask(ctx, s)
		}()
	}
	wg.Wait()
	best := -1
	var errs []error
	for i, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.opts.Addrs[i], a.err))
			continue
		}
		busy = busy || a.busy
		// The highest epoch wins; on a tie, a Sentinel with no failover
		// in progress: the leader of a failover reports the new epoch
		// with the old master's address until the failover ends (about
		// three seconds after the promotion, measured), while the others
		// already report the new master at that epoch.
		if best < 0 || a.epoch > answers[best].epoch || a.epoch == answers[best].epoch && answers[best].busy && !a.busy {
			best = i
		}
	}
	if best < 0 {
		return "", 0, false, fmt.Errorf("no Sentinel answered: %w", errors.Join(errs...))
	}
	a := answers[best]
	if a.busy {
		// Only the failover's leader is this recent: its address is the
		// master being failed over, not the outcome. Wait for the outcome.
		return "", 0, true, errFenced
	}
	if err := f.verify(ctx, a.addr); err != nil {
		return "", 0, busy, err
	}
	return a.addr, a.epoch, busy, nil
}

func (f *Follower) ask(ctx context.Context, s *redis.SentinelClient) answer {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	m, err := s.Master(ctx, f.opts.MasterName).Result()
	if err != nil {
		return answer{err: err}
	}
	if m["ip"] == "" || m["port"] == "" {
		return answer{err: errors.New("SENTINEL MASTER: no ip and port")}
	}
	epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
	if err != nil {
		return answer{err: fmt.Errorf("SENTINEL MASTER: config-epoch %q", m["config-epoch"])}
	}
	busy := slices.Contains(strings.Split(m["flags"], ","), "failover_in_progress")
	return answer{addr: net.JoinHostPort(m["ip"], m["port"]), epoch: epoch, busy: busy}
}

// verify asks addr for its ROLE: a Sentinel may name a node that is not
// (or no longer) a master, and writes sent to a replica would be refused.
func (f *Follower) verify(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: f.opts.DataUsername, Password: f.opts.DataPassword, CredentialsProvider: f.opts.DataCredentials,
		TLSConfig: f.opts.TLS, Dialer: f.opts.Dialer, DialTimeout: f.opts.Timeout, ReadTimeout: f.opts.Timeout, WriteTimeout: f.opts.Timeout,
		MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true,
	})
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return fmt.Errorf("ROLE of %s: %w", addr, err)
	}
	if len(v) == 0 || v[0] != "master" {
		return fmt.Errorf("%s is not a master (ROLE %v)", addr, v)
	}
	return nil
}

// channels are the Sentinel events the follower listens to: the switch,
// the promotion about to happen (the fence), and the ends of a failover
// (a check then switches, or lifts the fence).
var channels = []string{
	"+switch-master",
	"+failover-state-send-slaveof-noone", "+failover-state-wait-promotion", "+promoted-slave",
	"-failover-abort-not-elected", "-failover-abort-no-good-slave", "-failover-abort-slave-timeout",
	"+failover-end", "+failover-end-for-timeout",
}

// subscribe listens to Sentinel i until ctx ends, subscribing again after
// a failure (the other Sentinels' subscriptions go on meanwhile).
func (f *Follower) subscribe(ctx context.Context, i int) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := f.listen(ctx, f.sentinels[i])
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			delay = 100 * time.Millisecond
		}
		f.opts.Logger.Warn("sentinel subscription lost; subscribing again", "sentinel", f.opts.Addrs[i], "err", err, "retry_in", delay.String())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// listen serves one subscription until it fails: a Sentinel that stays
// silent through a Recheck and does not answer a PING within the next is
// taken as lost.
func (f *Follower) listen(ctx context.Context, s *redis.SentinelClient) error {
	ps := s.Subscribe(ctx, channels...)
	defer ps.Close()
	for range channels {
		if _, err := ps.ReceiveTimeout(ctx, f.opts.Timeout); err != nil {
			return err
		}
	}
	f.poke() // a switch may have happened while unsubscribed
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, f.opts.Recheck)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
		pinged = false
		m, ok := msg.(*redis.Message)
		if !ok || !f.about(m) {
			continue
		}
		switch m.Channel {
		case "+failover-state-send-slaveof-noone", "+failover-state-wait-promotion", "+promoted-slave":
			f.fence()
		}
		f.poke()
	}
}

// about reports a message about this follower's master. +switch-master
// starts with the master's name; the others describe an instance, then
// "@ <master name> <ip> <port>".
func (f *Follower) about(m *redis.Message) bool {
	if m.Channel == "+switch-master" {
		name, _, _ := strings.Cut(m.Payload, " ")
		return name == f.opts.MasterName
	}
	_, rest, ok := strings.Cut(m.Payload, " @ ")
	if !ok {
		// A master's own event (an abort) carries no "@": "master <name> ...".
		fields := strings.Fields(m.Payload)
		return len(fields) > 1 && fields[0] == "master" && fields[1] == f.opts.MasterName
	}
	name, _, _ := strings.Cut(rest, " ")
	return name == f.opts.MasterName
}

func (f *Follower) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}
