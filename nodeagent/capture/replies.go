package capture

import "github.com/heatsink-dev/heatsink/routing/command"

// replies follows the server→client stream of one sampled connection and
// matches each reply to its request, first in first out (Redis answers a
// connection's commands in order), so a read's key gets its reply's size.
//
// Why a mode rather than trust: a reply given to the wrong request would
// put a large value's size on a small key. Matching starts only where the
// request and reply streams are known to be in step, and stops at the
// first doubt:
//
//   - synced: from the connection's start (its SYN and SYN-ACK seen), or
//     confirmed (below). Replies are matched and their sizes counted.
//   - lost: a hole in either stream (a copy the kernel dropped, a header
//     the kernel did not copy, commands skipped unparsed), a reply with no
//     request waiting, a reply sent before the server had its request, or
//     the queue over its bounds. The queue is dropped; nothing is matched.
//   - tentative: a request was sent when the client had received every
//     reply byte seen (its ACK number is the reply stream's end), so if no
//     earlier command is still unanswered its reply starts there. Replies
//     are matched but not counted until a later request confirms it: sent,
//     again, with every reply byte received, when the parser is at a reply
//     boundary there and every queued request has had its reply. A wrong
//     start (an earlier command answered late, or the middle of a long
//     reply) almost always runs the queue dry or ends off a boundary, and
//     goes back to lost.
//   - stuck: the tentative start holds for a client that waits for its
//     replies before it sends more (one command, or one pipeline, at a
//     time), not for one that keeps commands in flight (a multiplexing
//     client such as ioredis: the commands lost with the stream are
//     answered after the next ones are sent). A connection that lost step
//     with more than one command waiting, or that sent a packet of
//     commands while others were unanswered, is not matched again until it
//     reconnects.
type replies struct {
	p replyParser
	// next is the reply stream's next sequence number, known once a
	// SYN-ACK, a reply or a request's ACK has shown it.
	next  uint32
	known bool
	mode  rmode
	// off: the connection's replies are never matched (it subscribed, ran
	// MONITOR or turned replies off: messages and replies no longer pair
	// with requests in RESP2).
	off bool
	// multi: in a transaction, where every command is answered QUEUED and
	// the values come in EXEC's array: nothing of it is counted.
	multi bool
	// bad: the reply being fed cannot be matched; lost after the feed.
	bad bool
	// concurrent: a packet of commands was sent while others waited for
	// their replies; stuck: matching stopped for the connection's life.
	concurrent, stuck bool
	// answered: a reply was matched since the tentative start (a
	// confirmation needs one: a request cut in packets would else confirm
	// before any reply came).
	answered bool
	// q from qh are the requests awaiting their reply; keys holds their
	// keys (pend.off, pend.n).
	q    []pend
	qh   int
	keys []byte
}

type rmode uint8

const (
	rLost rmode = iota
	rTentative
	rSynced
)

// pend is a request awaiting its reply: its key (in replies.keys), the
// targets its read was counted for (a bit per index; 0: count no size),
// and the client stream's position after it (the server cannot answer it
// before acknowledging that).
type pend struct {
	off, n  uint32
	targets uint64
	end     uint32
}

// Bounds of a connection's queue: requests awaiting replies and their keys.
// Over either, or over replyHeldTotal for all connections, matching stops
// (lost) until the stream is in step again.
const (
	replyMaxPending = 256
	replyMaxKeys    = 8 << 10
	replyHeldTotal  = 4 << 20
	pendBytes       = 24
)

func (t *tracker) newReplies(f *flow) *replies {
	r := &replies{}
	r.p.done = func(size int, push bool) { t.replyDone(f, size, push) }
	return r
}

// held is what r's queue counts against replyHeldTotal.
func (r *replies) held() int { return len(r.keys) + pendBytes*(len(r.q)-r.qh) }

func (t *tracker) clearQueue(r *replies) {
	t.replyHeld -= r.held()
	r.empty()
}

// empty empties the queue, keeping its memory unless a burst grew it (a
// connection's usual queue is a command or a pipeline's few).
func (r *replies) empty() {
	r.q, r.qh, r.keys = r.q[:0], 0, r.keys[:0]
	if cap(r.q) > 64 || cap(r.keys) > 2<<10 {
		r.q, r.keys = nil, nil
	}
}

// replyRestart: the connection starts (its SYN); its replies are in step
// from the SYN-ACK on.
func (t *tracker) replyRestart(f *flow) {
	if r := f.r; r != nil {
		t.clearQueue(r)
		r.mode, r.known, r.off, r.multi, r.bad, r.concurrent, r.stuck = rLost, false, false, false, false, false, false
	}
}

// replyLost stops matching f's replies until they are in step again. A
// reply cut short is counted with its estimated size if it was matched.
func (t *tracker) replyLost(f *flow) {
	r := f.r
	if r == nil || r.mode == rLost {
		return
	}
	if size, push, ok := r.p.estimate(); ok && !push && r.mode == rSynced && r.qh < len(r.q) && !r.bad {
		t.stats.ReplyEstimated++
		t.countReply(f, r.q[r.qh], size)
	}
	t.stats.ReplyLost++
	if r.concurrent || len(r.q)-r.qh > 1 || r.mode == rTentative && r.qh < len(r.q) {
		// Commands in flight when the step was lost: their replies may
		// come after later commands are sent, and a tentative start could
		// not tell them from those commands' replies.
		r.stuck = true
	}
	t.clearQueue(r)
	r.mode, r.bad = rLost, false
	r.p.reset()
}

// replyAtRequest looks at a request packet of f (before its commands are
// parsed): its ACK number is how much of the reply stream the client had.
func (t *tracker) replyAtRequest(f *flow, ack uint32) {
	r := f.r
	if r == nil || r.off || r.stuck {
		return
	}
	if r.mode != rLost && r.qh < len(r.q) {
		r.concurrent = true
		if r.mode == rTentative {
			t.replyLost(f) // not in step for certain: stuck
			return
		}
	}
	if !r.known {
		r.next, r.known = ack, true
	}
	if ack != r.next {
		return
	}
	switch r.mode {
	case rLost:
		r.mode, r.answered = rTentative, false
		r.p.reset()
	case rTentative:
		if r.answered && r.p.atBoundary() && r.qh == len(r.q) {
			r.mode = rSynced
		}
	}
}

// expect queues a command of f for its reply (key and read: what count
// counted it for).
func (t *tracker) expect(f *flow, p *parser, key []byte, read uint64) {
	r := f.r
	if r.off {
		return
	}
	// Followed even while lost: a connection that subscribed or is in a
	// transaction stays so after the streams are in step again.
	if len(p.args) > 0 && p.args[0] != nil {
		switch n := p.args[0]; {
		case command.EqFold(n, "SUBSCRIBE"), command.EqFold(n, "PSUBSCRIBE"), command.EqFold(n, "SSUBSCRIBE"),
			command.EqFold(n, "MONITOR"), command.EqFold(n, "SYNC"), command.EqFold(n, "PSYNC"):
			r.off = true
		case command.EqFold(n, "CLIENT") && len(p.args) > 1 && command.EqFold(p.args[1], "REPLY"):
			r.off = true // CLIENT REPLY OFF|SKIP: commands without replies
		case command.EqFold(n, "MULTI"):
			r.multi = true
		case command.EqFold(n, "EXEC"), command.EqFold(n, "DISCARD"):
			r.multi, read = false, 0
		}
	}
	if r.off {
		t.clearQueue(r)
		r.mode = rLost
		return
	}
	if r.mode == rLost {
		return
	}
	if r.multi {
		read = 0
	}
	if read == 0 {
		key = nil
	}
	if len(r.q)-r.qh >= replyMaxPending || len(r.keys)+len(key) > replyMaxKeys || t.replyHeld+pendBytes+len(key) > replyHeldTotal {
		// (keys of requests already answered count until the queue empties
		// or is compacted)
		t.stats.ReplyOverflow++
		t.replyLost(f)
		return
	}
	r.q = append(r.q, pend{off: uint32(len(r.keys)), n: uint32(len(key)), targets: read, end: f.next})
	r.keys = append(r.keys, key...)
	t.replyHeld += pendBytes + len(key)
}

// reply handles a segment from an endpoint: server→client, its client the
// segment's destination.
func (t *tracker) reply(s *segment) {
	t.stats.ReplyPackets++
	f := t.flows[s.server]
	if f == nil || f.server != s.client || f.r == nil || f.r.off {
		return
	}
	r := f.r
	if s.syn {
		r.next, r.known, r.mode = s.seq+1, true, rSynced
		r.p.reset()
		t.clearQueue(r)
		return
	}
	wire := max(s.wire, len(s.payload))
	if wire == 0 {
		return
	}
	t.stats.ReplyBytes += uint64(wire)
	if !r.known {
		r.next, r.known = s.seq, true
	}
	b, start := s.payload, s.seq
	switch d := int32(s.seq - r.next); {
	case d < 0: // a retransmission, in part or whole
		if wire <= int(-d) {
			return
		}
		cut := int(-d)
		wire -= cut
		b = b[min(cut, len(b)):]
		start = r.next
	case d > 0: // a hole: a copy lost, or reordered (replies are followed in order only, nothing is held)
		t.replyLost(f)
	}
	r.next = start + uint32(wire)
	if r.mode == rLost {
		return
	}
	t.cur, t.curAck = f, s.ack
	if ok := r.p.feed(b, wire-len(b)); !ok || r.bad {
		t.replyLost(f)
	}
}

// replyDone matches a whole reply of t.cur to the request it answers.
func (t *tracker) replyDone(f *flow, size int, push bool) {
	r := f.r
	if push || r.bad {
		return // a RESP3 push frame answers no request
	}
	if r.qh == len(r.q) || int32(t.curAck-r.q[r.qh].end) < 0 {
		// No request waiting, or sent before the server had it: not
		// in step.
		t.stats.ReplyUnmatched++
		r.bad = true
		return
	}
	h := r.q[r.qh]
	r.answered = true
	if r.mode == rSynced {
		t.stats.Replies++
		t.countReply(f, h, size)
	}
	held := r.held()
	r.qh++
	switch {
	case r.qh == len(r.q):
		r.empty()
	case r.qh > len(r.q)/2 && r.qh > 32:
		// Compact: the queue and its keys move to the front.
		base := r.q[r.qh].off
		n := copy(r.q, r.q[r.qh:])
		r.q, r.qh = r.q[:n], 0
		for i := range r.q {
			r.q[i].off -= base
		}
		r.keys = r.keys[:copy(r.keys, r.keys[base:])]
	}
	t.replyHeld += r.held() - held
}

// countReply counts a reply's size for the key of its request, for each
// target its read was counted for: the largest size (what big keys rank
// by, as a sidecar's reads) and the bytes, scaled by the reply sampling
// (flush scales them by the connection sampling too).
func (t *tracker) countReply(f *flow, h pend, size int) {
	if h.targets == 0 {
		return
	}
	key := f.r.keys[h.off : h.off+h.n]
	sz := uint32(min(size, 1<<32-1))
	for ti := range t.agg {
		if ti >= 64 || h.targets&(1<<ti) == 0 {
			continue
		}
		if t.unbatched {
			t.addReply(ti, key, t.agg[ti].hash(key), sz)
			continue
		}
		// In the batch, in turn with the adds (its key's entry is as
		// cold as theirs).
		t.queue(ti, key, aggItem{reply: true, size: sz})
	}
}

// addReply counts a reply's size for key in target ti's table.
func (t *tracker) addReply(ti int, key []byte, h uint64, sz uint32) {
	e := t.agg[ti].entryHashed(key, h, t.lim.MaxKeys)
	if e == nil {
		t.stats.KeysDropped++
		return
	}
	e.Size = max(e.Size, sz)
	// Saturating, as a sidecar's counts: a 512 MB value times the
	// sampling does not wrap to a small one.
	e.Bytes = uint32(min(uint64(e.Bytes)+uint64(sz)*uint64(t.replyEvery), 1<<32-1))
}
