package resp

import "errors"

// Streamed commands: a command carrying a large value (SET key <100 MB>)
// is returned as its head once the head is here (Limits.StreamAbove), and
// the rest of it is passed on as it arrives, in chunks of at most
// streamStep, so the Reader holds a few hundred KiB of it whatever its
// size, and a client that hangs up mid-value leaves nothing behind.

// frameStream is the progress of a streamed command.
type frameStream struct {
	// active: a head was returned and Chunk has not reached the end.
	active bool
	// start is the offset of the command's first byte, valid (moved
	// false) until Chunk first reads from the connection: HoldWhole
	// rewinds to it.
	start int
	moved bool
	// left is the bytes of the current bulk (payload and CRLF) still to
	// pass on; args the arguments after it still to come.
	left, args int64
	// hold: the next command is read whole (HoldWhole).
	hold bool
}

// errStreamPending is a caller's mistake: a streamed command's rest was
// not passed on (Chunk, SkipRest) or given back (HoldWhole, Rewind)
// before the next command was asked for.
var errStreamPending = errors.New("resp: the streamed command's rest is still to be read")

// streamHead returns the head of the command being parsed: its first
// bytes up to at (the arguments parsed, plus, when left > 0, the header of
// the large bulk whose left bytes follow), and args arguments after that.
func (r *Reader) streamHead(c *Command, at int, count, left, args int64) (int, error) {
	c.Raw = r.buf[r.r : r.r+at : r.r+at]
	c.Argc = int(count)
	c.Streamed = true
	r.fs = frameStream{active: true, start: r.r, left: left, args: args}
	r.r += at
	r.need = 0
	return at, nil
}

// Streaming reports whether a streamed command's rest is still to come.
func (r *Reader) Streaming() bool { return r.fs.active }

// Chunk returns the next bytes of the streamed command (after a head),
// reading from the connection when none is buffered; done is set with the
// last of them. The bytes are valid until the next call that reads. The
// headers of the arguments that follow the large one are checked as Redis
// checks them (the same errors); a malformed one is a *ProtocolError.
func (r *Reader) Chunk() (b []byte, done bool, err error) {
	fs := &r.fs
	if !fs.active {
		return nil, true, nil
	}
	for {
		from := r.r
		for r.r < r.w {
			if fs.left > 0 {
				n := int(min(fs.left, int64(r.w-r.r)))
				r.r += n
				fs.left -= int64(n)
				continue
			}
			if fs.args == 0 {
				break
			}
			// The next argument's header, when it is all here.
			hb := r.buf[r.r:r.w]
			j := cIndex(hb, '\r')
			if j < 0 {
				if len(hb) > r.limits.MaxInline {
					return nil, false, protoErr("too big bulk count string")
				}
				break
			}
			if j+2 > len(hb) {
				break
			}
			if hb[0] != '$' {
				return nil, false, expectedDollar(hb[0])
			}
			size, ok := string2ll(hb[1:j])
			if !ok || size < 0 || size > int64(r.limits.MaxBulk) {
				return nil, false, protoErr("invalid bulk length")
			}
			r.r += j + 2
			fs.left, fs.args = size+2, fs.args-1
		}
		if fs.left == 0 && fs.args == 0 {
			b := r.buf[from:r.r]
			r.endStream()
			return b, true, nil
		}
		if r.r > from {
			return r.buf[from:r.r], false, nil
		}
		// Nothing to pass on here: read, at most streamStep at a time.
		fs.moved = true
		r.need = r.w - r.r + streamStep
		if err := r.Fill(); err != nil {
			return nil, false, err
		}
	}
}

// endStream ends a streamed command; a buffer that grew for it and holds
// nothing more is given back, so a client that sent one large value does
// not keep a large buffer.
func (r *Reader) endStream() {
	r.fs = frameStream{}
	r.need = 0
	if r.r == r.w && len(r.buf) > r.initial {
		r.r, r.w = 0, 0
		r.buf = make([]byte, r.initial)
	}
}

// SkipRest reads and drops the rest of a streamed command (one the proxy
// refuses), as it arrives.
func (r *Reader) SkipRest() error {
	for r.fs.active {
		if _, _, err := r.Chunk(); err != nil {
			return err
		}
	}
	return nil
}

// HoldWhole gives a streamed command's head back, so that the next
// ReadCommand or TryCommand returns the command whole, as if StreamAbove
// were 0 for it. It reports false (and does nothing) once Chunk has read
// part of the rest.
func (r *Reader) HoldWhole() bool {
	if !r.fs.active || r.fs.moved {
		return false
	}
	r.r = r.fs.start
	r.fs = frameStream{hold: true}
	return true
}
