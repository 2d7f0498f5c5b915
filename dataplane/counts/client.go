// Package counts is the sidecar's side of the counts link to its node
// agent (package sidecarlink has the format and why it is UDP): a Client
// aggregates key accesses per (policy, key) and sends them every
// sidecarlink.FlushInterval, never blocking the caller. The sidecar's proxy
// and the go-redis hook use it.
package counts

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// ClientOptions tune a Client. The zero value is the default.
type ClientOptions struct {
	// FlushInterval is how often aggregated counts are sent. Default 100ms.
	FlushInterval time.Duration
	// MaxKeys bounds the distinct (policy, key) pairs buffered between two
	// flushes; observations of further keys are dropped and counted, so the
	// client's memory is bounded whatever the key cardinality. Hot keys are
	// seen early in an interval, so a flood of cold keys does not hide them.
	// Default 16384.
	MaxKeys int
	// MaxDatagram bounds each datagram. Default 1400, under the usual MTU so
	// no batch is fragmented.
	MaxDatagram int
	// Clock drives the flush ticker. Default: the real clock.
	Clock clock.WithTicker
	// LocalAddr, if set, is the IP batches are sent from. In a pod the
	// kernel picks the pod's address, which is what the node agent checks;
	// several simulated pods on one host (the demo) each need their own.
	LocalAddr string
}

// Stats are the client's counters since it started.
type Stats struct {
	// Observed counts Observe calls whose counts were buffered.
	Observed uint64
	// Dropped counts Observe calls that were not buffered (buffer full, key
	// too long or empty, client closed).
	Dropped uint64
	// Batches counts datagrams sent.
	Batches uint64
	// SendErrors counts datagrams the kernel refused (e.g. no node agent
	// listening); their entries are lost.
	SendErrors uint64
	// LostEntries counts (policy, key) entries in datagrams that failed.
	LostEntries uint64
}

const shards = 16

// Client aggregates key accesses and sends them to a node agent. Observe is
// safe for concurrent use, never blocks on the network and never allocates
// for a key already seen in the current interval.
type Client struct {
	conn    net.Conn
	opts    ClientOptions
	seed    maphash.Seed
	perShrd int
	shards  [shards]shard

	observed, dropped, batches, sendErrs, lost atomic.Uint64
	// baselines are, per policy, the commands sent raw since the last
	// flush and those of them that failed (ObserveRaw): *baseline by
	// policy string.
	baselines sync.Map
	// version is the counts version the agent reads (SetAgentVersion); 0
	// until told: sidecarlink.CountsVersion.
	version atomic.Int32

	sendMu sync.Mutex // serialises flushes (ticker, Flush, Close)
	spare  []entry
	bases  []policyBase
	encs   []sidecarlink.Encoder
	buf    [][]byte

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

type pk struct{ policy, key string }

// policyBase is one policy's baseline of a flush.
type policyBase struct {
	policy string
	m      sidecarlink.MoveCounts
}

type entry struct {
	policy, key           string
	reads, writes, nbytes uint32
	// size is the largest value of one access in the interval (see
	// accessSize), what the node agent ranks big keys by.
	size uint32
	// fam are the families of the key's commands (ObserveFamilies).
	fam routing.Families
	// refused counts the key's commands refused because of its move
	// (ObserveRefused).
	refused uint32
	// served and failed count the key's commands its move served, and
	// those that failed on its path (ObserveMoved); readServed and
	// readFailed the reads among them.
	served, failed, readServed, readFailed uint32
}

// baseline counts one policy's commands sent raw in an interval, and the
// reads among them.
type baseline struct{ total, failed, reads, readsFailed atomic.Uint32 }

type shard struct {
	mu   sync.Mutex
	idx  map[pk]int32
	ents []entry
	_    [40]byte // keep shards' locks on separate cache lines
}

// NewClient returns a client sending to addr ("host:port", UDP). It does not
// need the node agent to be up: batches sent while it is away are counted as
// lost.
func NewClient(addr string, opts ClientOptions) (*Client, error) {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = sidecarlink.FlushInterval
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 16384
	}
	if opts.MaxDatagram <= 0 {
		opts.MaxDatagram = 1400
	}
	if opts.MaxDatagram > sidecarlink.MaxDatagram {
		return nil, fmt.Errorf("counts: MaxDatagram %d exceeds %d", opts.MaxDatagram, sidecarlink.MaxDatagram)
	}
	if opts.MaxDatagram < sidecarlink.MinDatagram {
		return nil, fmt.Errorf("counts: MaxDatagram %d cannot hold one entry with the longest key", opts.MaxDatagram)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	d := net.Dialer{}
	if opts.LocalAddr != "" {
		ip := net.ParseIP(opts.LocalAddr)
		if ip == nil {
			return nil, fmt.Errorf("counts: LocalAddr %q is not an IP address", opts.LocalAddr)
		}
		d.LocalAddr = &net.UDPAddr{IP: ip}
	}
	conn, err := d.Dial("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("counts: node agent address %q: %w", addr, err)
	}
	c := &Client{
		conn:    conn,
		opts:    opts,
		seed:    maphash.MakeSeed(),
		perShrd: (opts.MaxKeys + shards - 1) / shards,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	for i := range c.shards {
		c.shards[i].idx = make(map[pk]int32)
	}
	go c.loop()
	return c, nil
}

// Observe counts reads, writes and value bytes of key under policy
// ("<namespace>/<name>"), and keeps the largest value size of one access
// in the interval (bytes ÷ (reads + writes): a call may count several
// accesses of one size). It never blocks on the network. It does not retain
// key (it copies it the first time it sees it in an interval), so key may
// alias a reused buffer; policy is retained.
func (c *Client) Observe(policy, key string, reads, writes, bytes uint32) {
	s, e := c.entry(policy, key)
	if e == nil {
		c.dropped.Add(1)
		return
	}
	e.reads = satAdd(e.reads, reads)
	e.writes = satAdd(e.writes, writes)
	e.nbytes = satAdd(e.nbytes, bytes)
	e.size = max(e.size, accessSize(reads, writes, bytes))
	s.mu.Unlock()
	c.observed.Add(1)
}

// ObserveFamilies adds the families of a command on key under policy (see
// routing.Families) to what the next batch says of the key: the manager
// chooses a key's moves by them. The proxy calls it once per command it
// classifies, refused or shed ones included, alongside Observe's counts.
// It never blocks on the network and does not retain key.
func (c *Client) ObserveFamilies(policy, key string, f routing.Families) {
	if s, e := c.entry(policy, key); e != nil {
		e.fam |= f
		s.mu.Unlock()
	}
}

// ObserveRefused counts one command on key under policy that the sidecar
// refused because of the key's move (a command the move cannot serve; not
// one shed by the key's budget, not an error Redis itself would give): the
// manager rolls back a move its clients' commands are refused under. It
// never blocks on the network and does not retain key.
func (c *Client) ObserveRefused(policy, key string) {
	if s, e := c.entry(policy, key); e != nil {
		e.refused = satAdd(e.refused, 1)
		s.mu.Unlock()
	}
}

// ObserveMoved counts one command on key under policy that the key's move
// served (the engine's path: split, pre-aggregate, replicate, the read
// moves), whether it is a read (a command that writes nothing), and
// whether it failed on that path (engine.Failure: an i/o error, a
// timeout, a place LOADING; not Redis' own semantic errors). The manager
// withdraws a move whose path fails clearly more than the sidecar's
// direct commands (ObserveRaw), all of them or the reads or the others
// apart. It never blocks on the network and does not retain key.
func (c *Client) ObserveMoved(policy, key string, read, failed bool) {
	if s, e := c.entry(policy, key); e != nil {
		e.served = satAdd(e.served, 1)
		if failed {
			e.failed = satAdd(e.failed, 1)
		}
		if read {
			e.readServed = satAdd(e.readServed, 1)
			if failed {
				e.readFailed = satAdd(e.readFailed, 1)
			}
		}
		s.mu.Unlock()
	}
}

// ObserveRaw counts one command under policy sent raw to Redis (on a key
// no move serves), whether it is a read, and whether it failed by
// engine.Failure's test: the baseline the next batch gives with each key
// its move served. It takes no lock once the policy was seen.
func (c *Client) ObserveRaw(policy string, read, failed bool) {
	v, ok := c.baselines.Load(policy)
	if !ok {
		v, _ = c.baselines.LoadOrStore(policy, &baseline{})
	}
	b := v.(*baseline)
	b.total.Add(1)
	if failed {
		b.failed.Add(1)
	}
	if read {
		b.reads.Add(1)
		if failed {
			b.readsFailed.Add(1)
		}
	}
}

// takeBaseline is policy's baseline since the last flush, reset.
func (c *Client) takeBaseline(policy string) sidecarlink.MoveCounts {
	v, ok := c.baselines.Load(policy)
	if !ok {
		return sidecarlink.MoveCounts{}
	}
	b := v.(*baseline)
	// Each counter is swapped on its own while commands are counted: a
	// part may lag its whole by a command, which the bounds below clamp.
	total, failed := b.total.Swap(0), b.failed.Swap(0)
	reads, readsFailed := b.reads.Swap(0), b.readsFailed.Swap(0)
	failed, reads = min(failed, total), min(reads, total)
	return sidecarlink.MoveCounts{BaseTotal: total, BaseFailed: failed, BaseReads: reads, BaseReadsFailed: min(readsFailed, reads, failed)}
}

// entry is key's entry under policy in this interval, added if new, with
// its shard locked; nil (nothing locked) when the key or policy is out of
// bounds, the client is closed or the shard is full. The key is copied
// when first seen in an interval, so a caller may pass a string that
// aliases a reused buffer; policy is kept as given: it is the sidecar's
// configuration, not request data.
func (c *Client) entry(policy, key string) (*shard, *entry) {
	if len(key) == 0 || len(key) > sidecarlink.MaxKeyLen || len(policy) == 0 || len(policy) > sidecarlink.MaxPolicyLen || c.closed.Load() {
		return nil, nil
	}
	s := &c.shards[maphash.String(c.seed, key)&(shards-1)]
	s.mu.Lock()
	if i, ok := s.idx[pk{policy, key}]; ok {
		return s, &s.ents[i]
	}
	if len(s.ents) >= c.perShrd {
		s.mu.Unlock()
		return nil, nil
	}
	key = strings.Clone(key)
	s.idx[pk{policy, key}] = int32(len(s.ents))
	s.ents = append(s.ents, entry{policy: policy, key: key})
	return s, &s.ents[len(s.ents)-1]
}

// accessSize is the value size of one access of a call counting reads +
// writes accesses of bytes in all.
func accessSize(reads, writes, bytes uint32) uint32 {
	if n := uint64(reads) + uint64(writes); n > 1 {
		return uint32(uint64(bytes) / n)
	}
	return bytes
}

func satAdd(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint32
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Observed:    c.observed.Load(),
		Dropped:     c.dropped.Load(),
		Batches:     c.batches.Load(),
		SendErrors:  c.sendErrs.Load(),
		LostEntries: c.lost.Load(),
	}
}

func (c *Client) loop() {
	defer close(c.done)
	t := c.opts.Clock.NewTicker(c.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C():
			c.Flush()
		}
	}
}

// Flush sends everything buffered now. The ticker calls it; tests and Close
// may too.
func (c *Client) Flush() {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	// Each key its move served carries the baseline of the interval: the
	// commands sent raw since the last flush (the entries swapped out
	// below are of the same interval, give or take the commands observed
	// meanwhile).
	c.bases = c.bases[:0]
	c.baselines.Range(func(k, _ any) bool {
		c.bases = append(c.bases, policyBase{policy: k.(string), m: c.takeBaseline(k.(string))})
		return true
	})
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		if len(s.ents) == 0 {
			s.mu.Unlock()
			continue
		}
		// Swap the entries out and clear the index under the lock, encode
		// outside it: Observe waits only for the swap.
		ents := s.ents
		s.ents = c.spare[:0]
		clear(s.idx)
		s.mu.Unlock()
		c.encode(ents)
		clear(ents) // drop string references
		c.spare = ents[:0]
	}
	for i := range c.encs {
		if c.encs[i].Len() > 0 {
			c.send(&c.encs[i])
		}
	}
	c.encs = c.encs[:0]
}

func (c *Client) encode(ents []entry) {
	for i := range ents {
		e := &ents[i]
		var m sidecarlink.MoveCounts
		if e.served > 0 {
			for _, b := range c.bases {
				if b.policy == e.policy {
					m = b.m
				}
			}
			m.Served, m.Failed = e.served, min(e.failed, e.served)
			m.ReadServed = min(e.readServed, e.served)
			m.ReadFailed = min(e.readFailed, m.ReadServed, m.Failed)
		}
		enc := c.encoder(e.policy)
		if !enc.TryAdd(e.key, e.reads, e.writes, e.nbytes, e.size, e.fam, e.refused, m) {
			c.send(enc)
			enc.Add(e.key, e.reads, e.writes, e.nbytes, e.size, e.fam, e.refused, m)
		}
	}
}

// encoder finds or starts the open batch of policy. Sidecars serve one or a
// few policies, so a linear search is the fastest lookup.
func (c *Client) encoder(policy string) *sidecarlink.Encoder {
	for i := range c.encs {
		if c.encs[i].Policy() == policy {
			return &c.encs[i]
		}
	}
	n := len(c.encs)
	if n < len(c.buf) {
		c.encs = append(c.encs, sidecarlink.Encoder{})
	} else {
		c.encs = append(c.encs, sidecarlink.Encoder{})
		c.buf = append(c.buf, make([]byte, 0, c.opts.MaxDatagram))
	}
	enc := &c.encs[n]
	if v := c.version.Load(); v != 0 {
		enc.SetVersion(int(v))
	}
	enc.Reset(c.buf[n], policy, c.opts.MaxDatagram)
	return enc
}

// SetAgentVersion makes the next batches of the version the agent reads
// (sidecarlink.AgentCountsVersion of its routing answer, which
// dataplane/watch reports through Options.OnAgent): an agent of the
// previous release rejects every batch of a later version, so a sidecar
// upgraded before its node's agent writes the agent's version, without
// the fields that version lacks (refusals). Until told, the client writes
// sidecarlink.CountsVersion.
func (c *Client) SetAgentVersion(v int) { c.version.Store(int32(v)) }

func (c *Client) send(enc *sidecarlink.Encoder) {
	n := enc.Len()
	if n == 0 {
		return
	}
	if _, err := c.conn.Write(enc.Bytes()); err != nil {
		c.sendErrs.Add(1)
		c.lost.Add(uint64(n))
	} else {
		c.batches.Add(1)
	}
	enc.Restart()
}

// Close sends what is buffered and releases the socket. Observe after Close
// drops.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return errors.New("counts: client already closed")
	}
	close(c.stop)
	<-c.done
	c.Flush()
	return c.conn.Close()
}
