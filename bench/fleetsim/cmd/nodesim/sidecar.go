package main

import (
	"math"
	"net/netip"
	"strings"
	"sync"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// counter is one simulated sidecar's counting client: it aggregates the key
// accesses offered to it as counts.Client does (one entry per distinct
// (policy, key) between two flushes, counts summed, at most maxKeys entries)
// and flush encodes them into real counts batches of at most maxDatagram
// bytes, which the node hands to its agent's HandleDatagram as if they had
// arrived from the sidecar's pod address.
//
// Why not a counts.Client per sidecar over UDP: 10,000 of them need 10,000
// sockets and 10,000 flush goroutines next to the agents' 1,000 listeners
// and the 10,000 routing streams, over this machine's open-files limit
// (20,000) and a large share of its two cores in send and receive system
// calls that measure the kernel's loopback, not heatsink. The batches,
// the agent's decoding, entitlement check, rate limit and sketch are the
// real ones; only the socket between them is skipped (--transport udp keeps
// it, where the limit allows).
type counter struct {
	src     netip.Addr
	maxKeys int

	mu   sync.Mutex
	idx  map[policyKey]int
	ents []counted
	// spare is the previous flush's ents, emptied, for the next tick's
	// counts (no new slice per sidecar per tick).
	spare []counted

	observed, dropped uint64 // under mu
}

type policyKey struct{ policy, key string }

type counted struct {
	policy, key           string
	reads, writes, nbytes uint32
}

// maxDatagram is the batch size limit, counts.Client's default (under the
// usual MTU).
const maxDatagram = 1400

// defaultMaxKeys is counts.Client's default bound on distinct keys between
// two flushes.
const defaultMaxKeys = 16384

func newCounter(src netip.Addr, maxKeys int) *counter {
	return &counter{src: src, maxKeys: maxKeys, idx: map[policyKey]int{}}
}

// Observe counts reads, writes and value bytes of key under policy, as
// counts.Client.Observe does: empty or too long keys and keys beyond maxKeys
// distinct ones are dropped and counted.
func (c *counter) Observe(policy, key string, reads, writes, bytes uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if key == "" || len(key) > sidecarlink.MaxKeyLen || policy == "" || len(policy) > sidecarlink.MaxPolicyLen {
		c.dropped++
		return
	}
	pk := policyKey{policy, key}
	if i, ok := c.idx[pk]; ok {
		e := &c.ents[i]
		e.reads, e.writes, e.nbytes = satAdd(e.reads, reads), satAdd(e.writes, writes), satAdd(e.nbytes, bytes)
		c.observed++
		return
	}
	if len(c.ents) >= c.maxKeys {
		c.dropped++
		return
	}
	pk.key = strings.Clone(key)
	c.idx[pk] = len(c.ents)
	c.ents = append(c.ents, counted{policy: policy, key: pk.key, reads: reads, writes: writes, nbytes: bytes})
	c.observed++
}

func satAdd(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint32
}

// flush encodes what was counted since the last flush into batches (one
// policy each, at most maxDatagram bytes) and hands each to send, which
// must not keep it (buf is reused). It returns the batches and entries
// sent.
func (c *counter) flush(buf []byte, send func(src netip.Addr, batch []byte)) (batches, entries int) {
	c.mu.Lock()
	ents := c.ents
	c.ents, c.spare = c.spare[:0], nil
	clear(c.idx)
	c.mu.Unlock()
	if len(ents) == 0 {
		c.keep(ents)
		return 0, 0
	}
	defer c.keep(ents)
	// Entries of one policy together; sidecars serve one policy, so this
	// is one pass in practice.
	var enc sidecarlink.Encoder
	for len(ents) > 0 {
		policy := ents[0].policy
		enc.Reset(buf, policy, maxDatagram)
		rest := ents[:0]
		for _, e := range ents {
			if e.policy != policy {
				rest = append(rest, e)
				continue
			}
			if !enc.Fits(e.key) {
				send(c.src, enc.Bytes())
				batches++
				enc.Reset(buf, policy, maxDatagram)
			}
			// The simulated clients GET and INCR: string families, so
			// the manager may split as it would for them.
			enc.Add(e.key, e.reads, e.writes, e.nbytes, 0, routing.FamStringRead|routing.FamCounter, 0, sidecarlink.MoveCounts{})
			entries++
		}
		if enc.Len() > 0 {
			send(c.src, enc.Bytes())
			batches++
		}
		ents = rest
	}
	return batches, entries
}

// keep gives flush's slice back for a later tick, its keys let go.
func (c *counter) keep(ents []counted) {
	clear(ents)
	c.mu.Lock()
	c.spare = ents[:0]
	c.mu.Unlock()
}

// stats returns the Observe calls counted and dropped.
func (c *counter) stats() (observed, dropped uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.observed, c.dropped
}
