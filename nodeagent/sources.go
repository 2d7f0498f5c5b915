package nodeagent

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// sources knows which pod addresses of the node may send counts and read
// routing tables, and for which policy, and bounds how fast each may send.
//
// Why: without it any pod on the node could send batches naming any policy
// and so make heatsink cache or split keys of its choosing. The manager
// tells the agent the node's injected pods (their addresses and the policy
// each was injected for); a batch from any other address, or naming another
// policy, is dropped and counted. The threat model is in docs/node-agent.md.
type sources struct {
	rate float64

	mu     sync.RWMutex
	byAddr map[netip.Addr]agentlink.Pod
	// uninjected maps the addresses of the node's pods without a sidecar
	// to their namespace: they send nothing to the agent, and only the
	// capture counts them (capture.go).
	uninjected map[netip.Addr]string

	lmu     sync.Mutex
	buckets map[netip.Addr]*bucket
}

// bucket is a token bucket of entries: rate per second, burst one second.
type bucket struct {
	tokens float64
	last   time.Time
}

func newSources(rate float64) *sources {
	return &sources{rate: rate, byAddr: map[netip.Addr]agentlink.Pod{}, buckets: map[netip.Addr]*bucket{}}
}

// set replaces the node's pods. Malformed addresses are skipped. A pod
// marked uninjected is never a source of batches; an address that is both
// (a pod replaced by an injected one) is the injected pod's, so its traffic
// is counted by its sidecar only.
func (s *sources) set(pods []agentlink.Pod) {
	m := make(map[netip.Addr]agentlink.Pod, len(pods))
	un := map[netip.Addr]string{}
	for _, p := range pods {
		a, err := netip.ParseAddr(p.IP)
		if err != nil {
			continue
		}
		if p.Uninjected {
			if ns, _, ok := strings.Cut(p.Policy, "/"); ok {
				un[a.Unmap()] = ns
			}
			continue
		}
		m[a.Unmap()] = p
	}
	for a := range m {
		delete(un, a)
	}
	s.mu.Lock()
	s.byAddr, s.uninjected = m, un
	s.mu.Unlock()
	s.lmu.Lock()
	for a := range s.buckets {
		if _, ok := m[a]; !ok {
			delete(s.buckets, a)
		}
	}
	s.lmu.Unlock()
}

// uninjectedPods returns the pods without a sidecar (do not modify).
func (s *sources) uninjectedPods() map[netip.Addr]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.uninjected
}

// verdict is why a batch is accepted or dropped (a metric label value).
type verdict string

const (
	verdictOK          verdict = "accepted"
	verdictUnknown     verdict = "unknown_source"
	verdictUnentitled  verdict = "unentitled"
	verdictRateLimited verdict = "rate_limited"
)

// entitled says whether addr may act for policy.
func (s *sources) entitled(addr netip.Addr, policy string) verdict {
	s.mu.RLock()
	p, ok := s.byAddr[addr.Unmap()]
	s.mu.RUnlock()
	switch {
	case !ok:
		return verdictUnknown
	case p.Policy != policy:
		return verdictUnentitled
	}
	return verdictOK
}

// admit takes entries from addr's bucket at now, or refuses the batch whole.
func (s *sources) admit(addr netip.Addr, entries int, now time.Time) bool {
	addr = addr.Unmap()
	s.lmu.Lock()
	defer s.lmu.Unlock()
	b := s.buckets[addr]
	if b == nil {
		b = &bucket{tokens: s.rate, last: now}
		s.buckets[addr] = b
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(s.rate, b.tokens+dt*s.rate)
		b.last = now
	}
	if b.tokens < float64(entries) {
		return false
	}
	b.tokens -= float64(entries)
	return true
}
