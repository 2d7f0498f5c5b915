package capture

import "bytes"

// replyParser reads the server→client half of a sampled connection for one
// thing: where each reply ends, so its size (in RESP bytes, what a sidecar
// reports for a read) can be given to the request it answers.
//
// Why headers only: a reply's size is in its headers ("$<len>", "*<count>")
// and the lengths of its bulk strings. A bulk's bytes are skipped by count,
// never copied or looked at, and the kernel keeps only the first
// replySnap bytes of each reply packet, so the rest of a packet is known
// by its length alone (feed's uncaptured). What it cannot step over is a
// header that fell in a packet's uncaptured part (replies packed behind a
// long one, or the elements of a large aggregate): the stream is then lost,
// and a reply cut that way is estimated (estimate) from what was walked.
//
// It holds a header line of at most lineMax bytes and one count per open
// aggregate (replyMaxDepth): nothing of a value, whatever is sent.
type replyParser struct {
	st rstate
	// line holds a header line being read ("$5", "*3"); lineN its length.
	line  [lineMax]byte
	lineN int
	typ   byte
	// skip is the bulk bytes (and their CRLF) still to pass.
	skip int
	// left are the elements still to come of each open aggregate.
	depth int
	left  [replyMaxDepth]int
	// size is the bytes of the current top-level reply so far; push: it
	// is a RESP3 push frame (no request's reply).
	size int
	push bool
	// For the estimate of a top-level aggregate: its header's size, its
	// element count, the elements completed and the size when the last one
	// completed.
	topHdr, topN, topDone, topDoneAt int

	// done is called at the end of each top-level reply.
	done func(size int, push bool)
}

type rstate uint8

const (
	rType   rstate = iota // the next byte is a type
	rHeader               // reading the digits of "$", "*", ... up to LF
	rLine                 // a line reply ("+OK", ":1", "-ERR ..."), up to LF
	rSkip                 // a bulk's bytes and CRLF
)

// replyMaxDepth bounds the aggregates open at once (Redis' deepest
// replies, COMMAND DOCS and XREAD, nest under 8).
const replyMaxDepth = 16

// replyMaxLen is the largest length or count accepted in a header: far
// above Redis' 512 MiB bulk and any real aggregate, and small enough that
// sizes never overflow.
const replyMaxLen = 1 << 40

// reset starts at a reply boundary.
func (r *replyParser) reset() {
	r.st, r.lineN, r.skip, r.depth, r.size, r.push = rType, 0, 0, 0, 0, false
	r.topHdr, r.topN, r.topDone, r.topDoneAt = 0, 0, 0, 0
}

// atBoundary says the next byte starts a top-level reply.
func (r *replyParser) atBoundary() bool { return r.st == rType && r.depth == 0 && r.size == 0 }

// feed parses b, then passes over uncaptured more bytes that the packet
// carried but the kernel did not copy. ok is false when the stream cannot
// be followed (a protocol error, or a header in the uncaptured bytes): the
// caller takes the stream as lost.
func (r *replyParser) feed(b []byte, uncaptured int) (ok bool) {
	for len(b) > 0 {
		n, ok := r.step(b)
		if !ok {
			return false
		}
		b = b[n:]
	}
	if uncaptured == 0 {
		return true
	}
	if r.st != rSkip {
		return false
	}
	n := min(r.skip, uncaptured)
	r.skip -= n
	r.size += n
	if r.skip == 0 {
		r.valueDone()
	}
	return n == uncaptured
}

// step consumes bytes from b (at least one) and says how many.
func (r *replyParser) step(b []byte) (n int, ok bool) {
	switch r.st {
	case rType:
		r.typ = b[0]
		r.size++
		switch r.typ {
		case '$', '=', '!', '*', '%', '~', '>', '|':
			if r.typ == '>' && r.depth == 0 {
				r.push = true
			}
			r.st, r.lineN = rHeader, 0
		case '+', '-', ':', '_', ',', '#', '(':
			r.st = rLine
		default:
			return 1, false
		}
		return 1, true
	case rHeader:
		i := bytes.IndexByte(b, '\n')
		take := len(b)
		if i >= 0 {
			take = i + 1
		}
		if r.lineN+take > lineMax {
			return take, false
		}
		r.lineN += copy(r.line[r.lineN:], b[:take])
		r.size += take
		if i < 0 {
			return take, true
		}
		l := r.line[:r.lineN]
		if len(l) < 3 || l[len(l)-2] != '\r' {
			return take, false
		}
		v, neg := 0, false
		digits := l[:len(l)-2]
		if digits[0] == '-' {
			neg, digits = true, digits[1:]
		}
		if len(digits) == 0 || len(digits) > 13 {
			return take, false
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return take, false
			}
			v = v*10 + int(c-'0')
		}
		if neg {
			if v != 1 { // only the RESP2 nulls, $-1 and *-1
				return take, false
			}
			v = -1
		}
		if v > replyMaxLen {
			return take, false
		}
		return take, r.header(v)
	case rLine:
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			r.size += len(b)
			return len(b), true
		}
		r.size += i + 1
		r.st = rType
		r.valueDone()
		return i + 1, true
	default: // rSkip
		n := min(r.skip, len(b))
		r.skip -= n
		r.size += n
		if r.skip == 0 {
			r.st = rType
			r.valueDone()
		}
		return n, true
	}
}

// header acts on a header's value v.
func (r *replyParser) header(v int) bool {
	r.st = rType
	switch r.typ {
	case '$', '=', '!':
		if v < 0 {
			r.valueDone()
			return true
		}
		r.st, r.skip = rSkip, v+2
		return true
	}
	// An aggregate: a map and an attribute count pairs; an attribute is
	// followed by the value it describes, one element more.
	n := v
	switch r.typ {
	case '%':
		n = 2 * v
	case '|':
		n = 2*v + 1
	}
	if r.depth == 0 {
		r.topHdr, r.topN = r.size, n
	}
	if n <= 0 {
		r.valueDone()
		return true
	}
	if r.depth == replyMaxDepth {
		return false
	}
	r.left[r.depth] = n
	r.depth++
	return true
}

// valueDone ends a value: the element of its aggregate, which may end
// that aggregate, and so on up; at the top, the reply.
func (r *replyParser) valueDone() {
	r.st = rType
	for r.depth > 0 {
		d := r.depth - 1
		r.left[d]--
		if d == 0 {
			r.topDone++
			r.topDoneAt = r.size
		}
		if r.left[d] > 0 {
			return
		}
		r.depth--
	}
	size, push := r.size, r.push
	r.reset()
	if r.done != nil {
		r.done(size, push)
	}
}

// estimate is the size of the reply in progress when the stream is lost
// in it: exact for a bulk string (its length is in its header), else the
// top-level aggregate's header plus its element count times the mean size
// of the elements walked (an element being skipped counts to its end).
// ok is false at a boundary, or before any element's size is known.
func (r *replyParser) estimate() (size int, push bool, ok bool) {
	if r.atBoundary() {
		return 0, false, false
	}
	if r.depth == 0 {
		return r.size + r.skip, r.push, r.st == rSkip
	}
	done, at := r.topDone, r.topDoneAt
	if r.st == rSkip && r.depth == 1 {
		done, at = done+1, r.size+r.skip
	}
	if done == 0 {
		return 0, r.push, false
	}
	return r.topHdr + (at-r.topHdr)*r.topN/done, r.push, true
}
