// Package sentinel finds a Redis master through Redis Sentinel and follows
// it across failovers, for the sidecar: the proxy and the engine connect to
// whatever master this package names, and applications keep pointing at
// the sidecar.
//
// It follows Sentinel's client guidelines (https://redis.io/docs/latest/
// develop/reference/sentinel-clients/): every Sentinel is asked for the
// master, the address named is checked with ROLE before it is used, a
// subscription to +switch-master on one Sentinel (another when that one
// fails) says at once when the master moved, and the Sentinels are asked
// again every few seconds in case a message was lost.
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
	// DataUsername and DataPassword authenticate to the data nodes, for
	// the ROLE check.
	DataUsername, DataPassword string
	// TLS, if set, is used for the Sentinels and the data nodes.
	TLS *tls.Config
	// Recheck is how often the Sentinels are asked again without a
	// +switch-master message (default 2s).
	Recheck time.Duration
	// Timeout bounds one exchange with a Sentinel or a data node
	// (default 1s).
	Timeout time.Duration
	// OnSwitch, if set, is called (on the follower's goroutine, one call
	// at a time) after the master changed, with the old and new address.
	OnSwitch func(old, new string)
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
			Addr: a, Username: opts.Username, Password: opts.Password, TLSConfig: opts.TLS,
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
		addr, epoch, err := f.resolve(ctx)
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
	go f.subscribe(ctx)
	tick := time.NewTicker(f.opts.Recheck)
	defer tick.Stop()
	// retry is armed when a check triggered by a message failed (the new
	// master not confirmed yet): checks follow every 100 ms until one
	// succeeds, rather than waiting for the next tick.
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
			f.opts.Logger.Warn("sentinel check failed", "master", f.opts.MasterName, "err", err)
			retry.Reset(100 * time.Millisecond)
		}
	}
}

// Check asks the Sentinels now and switches if they name a newer master.
func (f *Follower) check(ctx context.Context) error {
	addr, epoch, err := f.resolve(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	old, oldEpoch := f.master, f.epoch
	if addr == old || epoch < oldEpoch {
		// The same master, or an answer older than the configuration in
		// force (a Sentinel that has not heard of the failover yet).
		f.mu.Unlock()
		return nil
	}
	f.master, f.epoch = addr, epoch
	f.mu.Unlock()
	f.opts.Logger.Info("redis master switched", "master", f.opts.MasterName, "from", old, "to", addr, "config_epoch", epoch)
	if f.opts.OnSwitch != nil {
		f.opts.OnSwitch(old, addr)
	}
	return nil
}

// answer is one Sentinel's view of the master.
type answer struct {
	addr  string
	epoch int64
	err   error
}

// resolve asks every Sentinel at once for the master, takes the answer of
// the highest configuration epoch, and checks that the node it names says
// it is a master.
func (f *Follower) resolve(ctx context.Context) (string, int64, error) {
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
		if best < 0 || a.epoch > answers[best].epoch {
			best = i
		}
	}
	if best < 0 {
		return "", 0, fmt.Errorf("no Sentinel answered: %w", errors.Join(errs...))
	}
	a := answers[best]
	if err := f.verify(ctx, a.addr); err != nil {
		return "", 0, err
	}
	return a.addr, a.epoch, nil
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
	return answer{addr: net.JoinHostPort(m["ip"], m["port"]), epoch: epoch}
}

// verify asks addr for its ROLE: a Sentinel may name a node that is not
// (or no longer) a master, and writes sent to a replica would be refused.
func (f *Follower) verify(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: f.opts.DataUsername, Password: f.opts.DataPassword, TLSConfig: f.opts.TLS,
		DialTimeout: f.opts.Timeout, ReadTimeout: f.opts.Timeout, WriteTimeout: f.opts.Timeout,
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

// subscribe listens to +switch-master on one Sentinel, the next one when
// it fails, and kicks a check on every message about this master and
// every (re)subscription (a switch may have happened meanwhile).
func (f *Follower) subscribe(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		s := f.sentinels[i%len(f.sentinels)]
		err := f.listen(ctx, s)
		if ctx.Err() != nil {
			return
		}
		f.opts.Logger.Warn("sentinel subscription lost; trying the next Sentinel", "sentinel", f.opts.Addrs[i%len(f.opts.Addrs)], "err", err)
		if (i+1)%len(f.sentinels) == 0 {
			// Every Sentinel failed in turn: wait before the next round.
			t := time.NewTimer(f.opts.Timeout)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// listen serves one subscription until it fails: a Sentinel that stays
// silent through a Recheck and does not answer a PING within the next is
// taken as lost.
func (f *Follower) listen(ctx context.Context, s *redis.SentinelClient) error {
	ps := s.Subscribe(ctx, "+switch-master")
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, f.opts.Timeout); err != nil {
		return err
	}
	f.poke()
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
		f.opts.Logger.Debug("sentinel message", "msg", fmt.Sprintf("%T %v", msg, msg))
		if m, ok := msg.(*redis.Message); ok {
			// "<master name> <old ip> <old port> <new ip> <new port>"
			if name, _, _ := strings.Cut(m.Payload, " "); name == f.opts.MasterName {
				f.poke()
			}
		}
	}
}

func (f *Follower) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}
