package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// uplinkState is which manager the agent follows, if any.
type uplinkState struct {
	mu    sync.Mutex
	base  string // "http(s)://host:port" of the manager holding our stream
	token string // the token the stream was opened with
	// fresh is set when a stream (re)connects: the next tick sends a
	// summary at once, so a newly elected manager hears from every node
	// within a tick of its reconnection and can decide again.
	fresh bool
}

// takeFresh reports and clears fresh.
func (u *uplinkState) takeFresh() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	f := u.fresh
	u.fresh = false
	return f
}

func (u *uplinkState) manager() (base, token string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.base, u.token
}

func (u *uplinkState) connected() bool {
	base, _ := u.manager()
	return base != ""
}

func (u *uplinkState) set(base, token string) {
	u.mu.Lock()
	u.base, u.token = base, token
	u.fresh = base != ""
	u.mu.Unlock()
}

// Reconnect backoff after every manager address failed: from min to max,
// doubling, each wait jittered by ±50% so that 1,000 agents that lost their
// manager at once do not come back in step. The cap is short: during a
// failover every address refuses until the standby holds the lease, a
// refused connection costs nothing, and the agent must find the new leader
// within a report interval of its election.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = time.Second
)

// uplink follows the elected manager until ctx ends. It resolves the
// manager's name, tries each address in random order until one accepts the
// stream (only the leader serves it), and starts over when the stream ends.
// Everything the agent learnt (policies, pods, routing tables) stays in force
// while it is away, so sidecars keep their tables and counting goes on.
func (d *Agent) uplink(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		synced := false
		token, err := d.token()
		if err != nil {
			d.log.V(1).Info("no fleet token yet; waiting for it", "err", err.Error())
		}
		for _, addr := range d.managerAddrs(ctx) {
			if token == "" {
				break
			}
			ok, err := d.watch(ctx, addr, token)
			if ctx.Err() != nil {
				return
			}
			if ok {
				synced = true
				d.log.Info("manager stream ended; reconnecting", "manager", addr, "err", errString(err))
				break
			}
			d.log.V(1).Info("manager address refused the stream", "manager", addr, "err", errString(err))
		}
		if synced {
			backoff = minBackoff
		}
		wait := time.Duration(float64(backoff) * (0.5 + rand.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-d.opts.Clock.After(wait):
		}
		if !synced {
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// token is the fleet token: Options.Token, or the content of TokenFile as
// it is now (the Secret may be mounted, or rotated, after the agent
// started).
func (d *Agent) token() (string, error) {
	if d.opts.Token != "" {
		return d.opts.Token, nil
	}
	b, err := os.ReadFile(d.opts.TokenFile)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s is empty", d.opts.TokenFile)
	}
	return t, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// managerAddrs resolves Manager into "host:port" addresses, shuffled.
func (d *Agent) managerAddrs(ctx context.Context) []string {
	host, port, err := net.SplitHostPort(d.opts.Manager)
	if err != nil {
		d.log.Error(err, "bad manager address", "manager", d.opts.Manager)
		return nil
	}
	var hosts []string
	if ip := net.ParseIP(host); ip != nil {
		hosts = []string{host}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		hosts, err = d.opts.Resolve(rctx, host)
		cancel()
		if err != nil {
			d.log.V(1).Info("manager name did not resolve", "manager", host, "err", err.Error())
			return nil
		}
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = net.JoinHostPort(h, port)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// watch holds the event stream of the manager at addr until it ends. It
// reports whether the stream got as far as its snapshot (the address is the
// leader), and why it ended.
func (d *Agent) watch(ctx context.Context, addr, token string) (synced bool, err error) {
	scheme := "http"
	if d.opts.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + addr
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+agentlink.PathWatch+"?node="+url.QueryEscape(d.opts.NodeName), nil)
	if err != nil {
		return false, err
	}
	agentlink.SetToken(req, token)
	// The connection attempt is bounded; the stream itself is not (the
	// watchdog below ends a silent one).
	connectTimer := time.AfterFunc(3*time.Second, cancel)
	resp, err := d.client.Do(req)
	connectTimer.Stop()
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("manager answered %s", resp.Status)
	}
	// Summaries go in the version this manager reads: one of the previous
	// release rejects every summary of a later version.
	d.summaryVersion.Store(int32(agentlink.ManagerSummaryVersion(resp.Header)))
	// Watchdog: the manager writes at least a heartbeat every
	// HeartbeatInterval; three missed ones mean it is gone.
	events := make(chan struct{}, 1)
	go func() {
		idle := 3 * agentlink.HeartbeatInterval
		t := d.opts.Clock.NewTimer(idle)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-events:
				if !t.Stop() {
					select {
					case <-t.C():
					default:
					}
				}
				t.Reset(idle)
			case <-t.C():
				cancel()
				return
			}
		}
	}()
	defer d.up.set("", "")
	defer d.metrics.connected.Set(0)
	dec := json.NewDecoder(resp.Body)
	seen := map[string]bool{}
	for {
		ev, err := agentlink.DecodeEvent(dec)
		if errors.Is(err, agentlink.ErrInvalidEvent) {
			d.log.Error(err, "event from the manager dropped")
			continue
		}
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				err = errors.New("stream idle or closed")
			}
			return synced, err
		}
		select {
		case events <- struct{}{}:
		default:
		}
		switch ev.Type {
		case agentlink.TypePolicy:
			if ev.Directive == nil {
				continue
			}
			seen[ev.Directive.Policy] = true
			if err := d.applyDirective(ev.Directive); err != nil {
				d.log.Error(err, "directive refused")
			}
			d.scopeDirty()
		case agentlink.TypePolicyRemoved:
			d.removePolicy(ev.Removed)
			d.routes.remove(ev.Removed)
			d.scopeDirty()
		case agentlink.TypePods:
			d.sources.set(ev.Pods)
			d.metrics.pods.Set(float64(len(ev.Pods)))
			d.scopeDirty()
		case agentlink.TypeRouting:
			if ev.Routing != nil && d.routes.update(ev.Routing.Policy, ev.Routing.Version, ev.Routing.Table) &&
				d.opts.OnRoutingTable != nil {
				d.opts.OnRoutingTable(ev.Routing.Policy, ev.Routing.Version)
			}
		case agentlink.TypeSynced:
			if !synced {
				// The snapshot is complete: what it did not name is gone.
				for _, id := range d.policyIDs() {
					if !seen[id] {
						d.removePolicy(id)
					}
				}
				d.scopeDirty()
				d.routes.keepOnly(seen)
				synced = true
				d.up.set(base, token)
				d.metrics.connected.Set(1)
				d.metrics.connects.Inc()
			}
		case agentlink.TypeHeartbeat:
		}
	}
}
