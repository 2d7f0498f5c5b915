//go:build linux

package proxy

import "time"

// The proxy's own time per command, sampled: heatsink_proxy_command_overhead_seconds.
//
// One forwarded command at a time is followed through the event loop, and
// the next one is picked after overheadEvery more commands have been
// forwarded. Its time is the sum of two spans on the loop's monotonic
// clock:
//
//   - request: from the start of the loop's round that read the command's
//     bytes (the moment the loop took the ready events from epoll), to the
//     end of the upstream write that put its last byte on the connection
//     to Redis;
//   - reply: from the start of the round that read its reply (its last
//     part, for a reply that came in several reads), to the end of the
//     client write that put the reply's last byte on the client's
//     connection.
//
// What Redis and the network take (from the upstream write to the upstream
// read) is left out, so the sum is what the sidecar adds to the command's
// latency: the other events of the round handled before this one, reading,
// parsing, classifying, waiting for the end of the round (the other
// clients' commands of that round are parsed before any is written), and
// the system calls. Waking up for the round (the netpoller, the epoll_wait
// that takes the events) is not in it. In a pipeline the command picked is
// the first of the client's read, so its time includes parsing the rest of
// the pipeline. A command is dropped from the sample (never observed) when
// a peer's time would be counted as the proxy's (the upstream connection
// or the client's socket buffer was full), when its reply is streamed in
// parts or arrives out of order (cluster pipelines across nodes), is
// redirected, or its client or connection goes away. Commands served by a
// session goroutine (connection state, pub/sub), by the
// engine or by the proxy itself are not sampled.
//
// The cost is a few compare-and-branch per command and, per sampled
// command, two clock reads (the round's start is read anyway) and one
// histogram observation; nothing allocates.

// overheadEvery is how many commands are forwarded between two sampled
// ones (at least: one is followed at a time).
const overheadEvery = 64

type probeStage uint8

const (
	// probeIdle: counting down to the next sample.
	probeIdle probeStage = iota
	// probeArmed: the next command forwarded right after a client read is
	// the sample.
	probeArmed
	// probeQueued: the sample waits in the upstream connection's buffer.
	probeQueued
	// probeSent: written upstream; waiting for its reply.
	probeSent
	// probeReplied: its reply waits in the client's buffer.
	probeReplied
)

type probe struct {
	stage probeStage
	left  int // commands to forward before the next sample (probeIdle)
	// fillC is the client whose read the loop is parsing, and fillAt the
	// start of the round of that read: set only while that read's commands
	// are parsed, so a sample's start is the read that brought it.
	fillC  *lclient
	fillAt int64
	// start is fillAt of the sample's read, before the request span ends;
	// then the start of the reply span.
	start int64
	own   int64 // the request span, once it ended
	c     *lclient
	u     *lupstream
	seq   uint64
	// end is the offset just past the sample in u.wbuf (probeQueued) or
	// past its reply in c.out (probeReplied).
	end int
}

// nanos is the loop's monotonic clock (time.Since reads only the
// monotonic clock).
func (l *loop) nanos() int64 { return int64(time.Since(l.epoch)) }

// probeFill notes c's read when a sample is wanted.
func (l *loop) probeFill(c *lclient) {
	if l.pr.stage == probeArmed {
		l.pr.fillC, l.pr.fillAt = c, l.roundStart()
	}
}

// roundStart is the start of the round on the loop's clock.
func (l *loop) roundStart() int64 { return int64(l.now.Sub(l.epoch)) }

// probeForward counts a command queued on u for c, and takes it as the
// sample when one is wanted and it came with the read being parsed.
func (l *loop) probeForward(u *lupstream, c *lclient) {
	pr := &l.pr
	if pr.stage == probeIdle {
		if pr.left--; pr.left > 0 {
			return
		}
		pr.stage = probeArmed
	}
	if pr.stage != probeArmed || pr.fillC != c || !u.open() {
		return
	}
	pr.stage, pr.c, pr.u, pr.seq, pr.end, pr.start = probeQueued, c, u, c.sent, len(u.wbuf), pr.fillAt
}

// probeWritten ends the request span once u's write passed the sample.
func (l *loop) probeWritten(u *lupstream) {
	pr := &l.pr
	if pr.stage != probeQueued || pr.u != u {
		return
	}
	if u.woff < pr.end || u.tio != nil && u.tio.pending() {
		// The write stopped short (the socket buffer is full, and flushUp
		// may then move the buffer's bytes): Redis is not reading, and the
		// wait would be its time, not ours.
		l.probeDrop()
		return
	}
	pr.own = l.nanos() - pr.start
	pr.stage = probeSent
}

// probeUpRead notes a read of u while the sample's reply is awaited.
func (l *loop) probeUpRead(u *lupstream) {
	if l.pr.stage == probeSent && l.pr.u == u {
		l.pr.start = l.roundStart()
	}
}

// probeReply is called with each reply u hands out (before delivery): the
// sample's, in order and whole, starts waiting in its client's buffer.
func (l *loop) probeReply(u *lupstream, f *fent, n int, whole bool) {
	pr := &l.pr
	if pr.stage != probeSent || pr.u != u || pr.c != f.c || pr.seq != f.seq {
		return
	}
	if !whole || f.c.state == cClosed || f.seq != f.c.recv {
		l.probeDrop()
		return
	}
	pr.stage, pr.end = probeReplied, len(f.c.out)+n
}

// probeClientWritten observes the sample once c's write passed its reply.
func (l *loop) probeClientWritten(c *lclient) {
	pr := &l.pr
	if pr.stage != probeReplied || pr.c != c {
		return
	}
	if c.woff < pr.end {
		if c.wblocked {
			l.probeDrop() // the client is not reading: its time
		}
		return
	}
	own := pr.own + l.nanos() - pr.start
	l.p.m.overhead.Observe(float64(own) / 1e9)
	l.probeDrop()
}

// probeGone drops the sample when its client or upstream connection goes.
func (l *loop) probeGone(c *lclient, u *lupstream) {
	if l.pr.stage >= probeQueued && (c != nil && l.pr.c == c || u != nil && l.pr.u == u && l.pr.stage <= probeSent) {
		l.probeDrop()
	}
}

// probeDrop ends the sample (observed or not) and counts down to the next.
func (l *loop) probeDrop() {
	l.pr = probe{stage: probeIdle, left: overheadEvery}
}

// probeParsed ends the parse of a read: later parses are not from it.
func (l *loop) probeParsed() { l.pr.fillC = nil }
