package nodeagent

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/summary"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// ingest reads batches until ctx ends. One reader is enough: decoding and
// counting a batch takes microseconds, and the socket's receive buffer
// absorbs bursts.
func (d *Agent) ingest(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = d.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, sidecarlink.MaxDatagram+1)
	var dec sidecarlink.Decoder
	for {
		n, from, err := d.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			d.log.V(1).Info("ingest read failed", "err", err.Error())
			continue
		}
		d.handle(&dec, from.Addr(), buf[:n])
	}
}

// HandleDatagram counts one batch as if it arrived from src: the entry point
// of the fleet simulator, which feeds thousands of simulated nodes real wire
// batches without a socket each. It is safe for concurrent use. Its decoders
// are pooled, as ingest keeps one: a new one per batch grew its entries anew
// each time, an allocation a real agent does not make.
func (d *Agent) HandleDatagram(src netip.Addr, buf []byte) {
	dec := decoders.Get().(*sidecarlink.Decoder)
	d.handle(dec, src, buf)
	decoders.Put(dec)
}

var decoders = sync.Pool{New: func() any { return new(sidecarlink.Decoder) }}

// handle counts one datagram from src. A bad batch, a batch from a pod that
// may not send for the policy it names, or one over the pod's rate is
// dropped whole and counted by reason; it never panics (the decoder is
// fuzzed).
func (d *Agent) handle(dec *sidecarlink.Decoder, src netip.Addr, buf []byte) {
	b, err := dec.Decode(buf)
	if err != nil {
		d.metrics.batches.WithLabelValues(sidecarlink.Reason(err)).Inc()
		return
	}
	policy := unsafe.String(unsafe.SliceData(b.Policy), len(b.Policy)) // aliases buf for the calls below
	if v := d.sources.entitled(src, policy); v != verdictOK {
		d.metrics.batches.WithLabelValues(string(v)).Inc()
		return
	}
	d.mu.RLock()
	p := d.policies[policy]
	d.mu.RUnlock()
	if p == nil {
		d.metrics.batches.WithLabelValues("unknown_policy").Inc()
		return
	}
	now := d.opts.Clock.Now()
	if !d.sources.admit(src, len(b.Entries), now) {
		d.metrics.batches.WithLabelValues(string(verdictRateLimited)).Inc()
		return
	}
	d.count(p, now, b.Entries)
	d.batches.Add(1)
	d.metrics.accepted.Inc()
}

// count adds entries to p's sketch at now: the one place counts enter a
// policy, from a sidecar's batch or from the capture. Keys outside the
// policy's globs are left out. It returns the entries counted.
func (d *Agent) count(p *policyState, now time.Time, entries []sidecarlink.Entry) int {
	// bad: a command failed on a move's path or was refused because of a
	// move, which may make the next summary urgent (outcomesUrgent).
	counted, filtered, bad := 0, 0, false
	p.mu.Lock()
	p.sk.Advance(now)
	p.sizes.Advance(now)
	for i := range entries {
		e := &entries[i]
		// The key may alias a datagram only for the calls below; the
		// sketch copies what it keeps.
		key := unsafe.String(unsafe.SliceData(e.Key), len(e.Key))
		if !p.filter.Match(key) {
			filtered++
			continue
		}
		p.sk.UpdateFamilies(key, e.Reads, e.Writes, e.Bytes, e.Families)
		p.sizes.Observe(key, uint64(e.Size))
		if e.Refused > 0 {
			p.countRefused(key, uint64(e.Refused))
			bad = true
		}
		if e.Moved.Served > 0 {
			p.countMoved(key, e.Moved)
			bad = bad || e.Moved.Failed > 0
		}
		p.reads += uint64(e.Reads)
		p.writes += uint64(e.Writes)
		counted++
	}
	urgent := bad && p.outcomesUrgent(now, p.interval(d.reportInterval()))
	p.mu.Unlock()
	d.observations.Add(uint64(counted))
	if counted > 0 {
		d.dirty.Store(true)
	}
	if urgent {
		select {
		case d.movesFailing <- struct{}{}:
		default: // one is pending already
		}
	}
	d.metrics.counted.Add(float64(counted))
	if filtered > 0 {
		d.metrics.filtered.Add(float64(filtered))
	}
	return counted
}

// countRefused adds n commands refused because of key's move. A key not
// yet counted since the last summary is added while there is room: a
// refused key is a mitigated one, of which a policy has few.
//
// key may alias the datagram's buffer: a map keeps the key of an
// assignment to an entry it holds (the runtime replaces a string key on
// update), so the count is added through a pointer, and a new entry's key
// is a copy; assigning through the alias left keys that changed with the
// next datagram, so a key's counts were split over entries named after
// other keys' bytes.
func (p *policyState) countRefused(key string, n uint64) {
	if c := p.refused[key]; c != nil {
		*c += n
		return
	}
	if len(p.refused) >= agentlink.MaxRefusedKeysPerPolicy {
		return
	}
	if p.refused == nil {
		p.refused = make(map[string]*uint64)
	}
	p.refused[strings.Clone(key)] = &n
}

// refusalsUrgent reports whether the refusals counted since the last
// summary make the next one urgent: those of a key none of whose refusals
// went in a summary sent within the last report interval. The manager
// withdraws a move its clients' commands are refused under on the first
// summary that lists a refusal (decide's holdMoves), so that summary is the
// evidence, and waiting for the interval cost up to one report interval;
// refusals that go on after it (the move withdrawn, the table on its way)
// tell the manager nothing new and wait for the interval.
func (p *policyState) refusalsUrgent(now time.Time, interval time.Duration) bool {
	for k, at := range p.refusedSent {
		if !at.After(now.Add(-interval)) {
			delete(p.refusedSent, k)
		}
	}
	for k := range p.refused {
		if _, ok := p.refusedSent[k]; !ok {
			return true
		}
	}
	return false
}

// takeRefused lists the refusals counted since the last summary sent, by
// key; sent uncounts them once the summary is sent at now (counts that
// arrive in between stay for the next) and keeps when for refusalsUrgent.
func (p *policyState) takeRefused() (out []agentlink.KeyCount, sent func(now time.Time)) {
	for k, n := range p.refused {
		out = append(out, agentlink.KeyCount{Key: k, Count: *n})
	}
	slices.SortFunc(out, func(a, b agentlink.KeyCount) int { return strings.Compare(a.Key, b.Key) })
	return out, func(now time.Time) {
		for _, kc := range out {
			if p.refusedSent == nil {
				p.refusedSent = make(map[string]time.Time)
			}
			p.refusedSent[kc.Key] = now
			if c := p.refused[kc.Key]; c == nil || *c <= kc.Count {
				delete(p.refused, kc.Key)
			} else {
				*c -= kc.Count
			}
		}
	}
}

// countMoved adds the outcomes of key's commands its move served in one
// sidecar interval, with that interval's baseline. A key not yet counted
// since the last summary is added while there is room: a key served by a
// move is a mitigated one. key may alias the datagram's buffer: the entry
// is stored under its own copy of the key (c.Key), never through the
// alias (countRefused).
func (p *policyState) countMoved(key string, m sidecarlink.MoveCounts) {
	c, ok := p.moved[key]
	if !ok {
		if len(p.moved) >= agentlink.MaxMovedKeysPerPolicy {
			return
		}
		if p.moved == nil {
			p.moved = make(map[string]agentlink.KeyMoved)
		}
		key = strings.Clone(key)
		c.Key = key
	}
	c.Served += uint64(m.Served)
	c.Failed += uint64(min(m.Failed, m.Served))
	c.BaseTotal += uint64(m.BaseTotal)
	c.BaseFailed += uint64(min(m.BaseFailed, m.BaseTotal))
	rs := min(m.ReadServed, m.Served)
	c.ReadServed += uint64(rs)
	c.ReadFailed += uint64(min(m.ReadFailed, rs, m.Failed))
	br := min(m.BaseReads, m.BaseTotal)
	c.BaseReads += uint64(br)
	c.BaseReadsFailed += uint64(min(m.BaseReadsFailed, br, m.BaseFailed))
	p.moved[c.Key] = c
}

// outcomesUrgent reports whether what the sidecars said of the policy's
// moves since the last summary makes the next one urgent: failures on a
// move's path (movesUrgent) or commands newly refused (refusalsUrgent).
func (p *policyState) outcomesUrgent(now time.Time, interval time.Duration) bool {
	return p.movesUrgent(now, interval) || p.refusalsUrgent(now, interval)
}

// movesUrgent reports whether the move outcomes counted since the last
// summary, with those sent within the last report interval, make the next
// one urgent (summary.MovesUrgent).
func (p *policyState) movesUrgent(now time.Time, interval time.Duration) bool {
	p.pruneMovedSent(now, interval)
	return summary.MovesUrgent(maps.Values(p.moved), p.movedRecently)
}

// movedRecently is key's outcomes in the summaries sent within the last
// report interval (as pruneMovedSent last left them).
func (p *policyState) movedRecently(key string) agentlink.KeyMoved {
	r := agentlink.KeyMoved{Key: key}
	for _, s := range p.movedSent {
		if i, ok := slices.BinarySearchFunc(s.keys, key, func(m agentlink.KeyMoved, k string) int { return strings.Compare(m.Key, k) }); ok {
			r = summary.Add(r, s.keys[i])
		}
	}
	return r
}

// pruneMovedSent forgets the outcomes sent more than one report interval
// before now.
func (p *policyState) pruneMovedSent(now time.Time, interval time.Duration) {
	i := 0
	for i < len(p.movedSent) && !p.movedSent[i].at.After(now.Add(-interval)) {
		i++
	}
	p.movedSent = slices.Delete(p.movedSent, 0, i)
}

// takeMoved lists the move outcomes counted since the last summary sent,
// by key; sent uncounts them once the summary is sent at now (counts that
// arrive in between stay for the next) and keeps them for movesUrgent.
func (p *policyState) takeMoved() (out []agentlink.KeyMoved, sent func(now time.Time)) {
	for _, m := range p.moved {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b agentlink.KeyMoved) int { return strings.Compare(a.Key, b.Key) })
	return out, func(now time.Time) {
		if len(out) > 0 {
			p.movedSent = append(p.movedSent, movedSent{at: now, keys: out})
		}
		for _, m := range out {
			c := p.moved[m.Key]
			if c.Served <= m.Served {
				delete(p.moved, m.Key)
				continue
			}
			c.Served -= m.Served
			c.Failed -= min(c.Failed, m.Failed)
			c.BaseTotal -= min(c.BaseTotal, m.BaseTotal)
			c.BaseFailed -= min(c.BaseFailed, m.BaseFailed)
			c.ReadServed -= min(c.ReadServed, m.ReadServed)
			c.ReadFailed -= min(c.ReadFailed, m.ReadFailed)
			c.BaseReads -= min(c.BaseReads, m.BaseReads)
			c.BaseReadsFailed -= min(c.BaseReadsFailed, m.BaseReadsFailed)
			p.moved[m.Key] = c
		}
	}
}
