package proxy

import (
	"bytes"
	"strconv"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Sessions in the order their clients' bytes came: order/arrivals_linux.go
// (elsewhere, order/arrivals_other.go does nothing).

// arrivalIO reads and writes the session's client, telling arrivals
// when the session reads it again, and when it waits for the client to
// take its replies.
type arrivalIO struct{ s *session }

func (r arrivalIO) Write(b []byte) (int, error) { return r.s.p.arrivals.Write(r.s.arr, b) }

func (r arrivalIO) Read(b []byte) (int, error) {
	s := r.s
	if !s.readingAhead { // not watchClient, which reads ahead while Redis blocks
		// Bytes buffered and not a command: a command's first part, all
		// the session can handle of what it read.
		s.p.arrivals.Reading(s.arr, s.cr.Buffered() > 0 || s.cr.Streaming())
	}
	return s.p.arrivals.Read(s.arr, b)
}

// newArrivals makes the sessions' order of arrival (order.Arrivals),
// which asks handsOff whether a client's bytes may hand it off.
func (p *Proxy) newArrivals() *order.Arrivals {
	var args [][]byte // handsOff's: it is called under the order's lock
	return order.New(p.m.orderBounds.Inc, func(b []byte) bool { return handsOff(b, &args, p.cfg.Cluster) })
}

// handsOff reports whether a command in b, as a client in shared mode
// sends it, may take another connection than the shared one: anything
// decide does not forward there, and blocking commands. A hand-off
// pipelined behind other commands counts too (its effects follow theirs
// and come before those of the commands other clients send after it), up
// to handsOffScan commands. Bytes that do not begin with a whole
// multibulk command (an inline command, a command not all here, garbage)
// count as one that may; a later command not all here ends the scan (the
// rest of a pipeline). cluster: classified as in cluster mode, where a
// cluster-wide command (FLUSHALL, KEYS, ...) hands off. args is scratch
// space.
func handsOff(b []byte, args *[][]byte, cluster bool) bool {
	if len(b) == 0 {
		return false
	}
	for i := 0; i < handsOffScan && len(b) > 0; i++ {
		rest, may, whole := handsOffOne(b, args, cluster)
		switch {
		case !whole:
			return i == 0
		case may:
			return true
		}
		b = rest
	}
	return false
}

// handsOffScan bounds the commands handsOff looks at in one read.
const handsOffScan = 64

// handsOffOne looks at the first command in b: whole reports whether it
// is a whole multibulk command, may whether it may hand off, rest what
// follows it.
func handsOffOne(b []byte, args *[][]byte, cluster bool) (rest []byte, may, whole bool) {
	line := func() ([]byte, bool) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return nil, false
		}
		l := b[:i]
		b = b[i+2:]
		return l, true
	}
	h, ok := line()
	if !ok || len(h) < 2 || h[0] != '*' {
		return nil, true, false
	}
	n, err := strconv.Atoi(string(h[1:]))
	if err != nil || n < 1 || n > 64 {
		return nil, true, false // a very long command is rarely a hand-off; but may be
	}
	*args = (*args)[:0]
	for range n {
		h, ok := line()
		if !ok || len(h) < 2 || h[0] != '$' {
			return nil, true, false
		}
		l, err := strconv.Atoi(string(h[1:]))
		if err != nil || l < 0 || l+2 > len(b) {
			return nil, true, false
		}
		*args = append(*args, b[:l])
		b = b[l+2:]
	}
	a := *args
	info, known := command.Lookup(a[0])
	return b, decide(info, known, a, mode{shared: true, cluster: cluster, proto: 2}).op != opForward || info.IsBlocking(a), true
}
