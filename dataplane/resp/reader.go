// Package resp reads and writes the Redis serialization protocol (RESP2 and
// RESP3) for a proxy: it finds the boundaries of commands and replies in a
// connection's byte stream without copying them, so that a proxy can forward
// the raw bytes of a whole pipeline in one write and only look inside the
// few fields it needs (the command name and its keys, the first bytes of an
// error reply).
//
// The Reader owns one growable buffer per connection. Slices it returns
// point into that buffer and stay valid only until the next call that reads
// (ReadCommand, ReadReply, Fill); callers copy what they keep. This is what
// makes the fast path allocation-free.
package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Limits bound what a Reader accepts, so that a hostile or broken peer gets
// an error instead of making the process allocate without bound.
type Limits struct {
	// MaxBulk is the greatest bulk string length (Redis' proto-max-bulk-len
	// default is 512 MiB).
	MaxBulk int
	// MaxArgs is the greatest number of arguments in one command, or of
	// elements announced by one aggregate reply header.
	MaxArgs int
	// MaxInline is the greatest length of an inline command, of the header
	// line of a multibulk command, or of a line in a reply.
	MaxInline int
	// MaxDepth is the greatest nesting of aggregate replies Decode and
	// ReadValue take apart (the reply scanner of ReadReply and TryReply has
	// no nesting limit: it only counts the elements still owed).
	MaxDepth int
	// StreamAbove, when positive, lets ReadCommand and TryCommand return a
	// multibulk command before all of it has arrived, as its head
	// (Command.Streamed), once one of its bulk arguments announces more
	// than StreamAbove bytes or its bytes before an argument pass
	// StreamAbove: the caller passes the rest on with Chunk as it arrives
	// (stream.go), so a 512 MiB value is never held whole. Zero holds
	// every command whole.
	StreamAbove int
}

// defaultLimits mirror Redis' own defaults for what a client may send. It
// is a constant in all but name: nothing assigns it, and DefaultLimits
// hands out copies.
var defaultLimits = Limits{MaxBulk: 512 << 20, MaxArgs: 1<<31 - 1, MaxInline: 64 << 10, MaxDepth: 64}

// DefaultLimits returns Redis' own limits on client frames. A function, not
// a variable, so no importer can change the process-wide default.
func DefaultLimits() Limits { return defaultLimits }

// ReplyLimits are for reading Redis' replies: whatever their size or depth,
// a proxy must relay them (a script can nest thousands of levels, LRANGE
// can return millions of elements, an error line can be long), so only
// memory bounds them.
func ReplyLimits() Limits {
	return Limits{MaxBulk: maxBulkReply, MaxArgs: maxAggregate, MaxInline: 1<<62 - 1, MaxDepth: 64}
}

// ProtocolError is a malformed stream. The connection cannot be resynchronised
// after one: the proxy answers with an error reply and closes it.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

func protoErr(format string, a ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, a...)}
}

// IsProtocolError reports whether err is a malformed stream.
func IsProtocolError(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(*ProtocolError); ok {
		return true
	}
	var pe *ProtocolError
	return errors.As(err, &pe)
}

// errIncomplete is internal: the buffer holds only part of a frame.
var errIncomplete = errors.New("resp: incomplete frame")

// Reader parses frames from an io.Reader through one buffer.
type Reader struct {
	rd     io.Reader
	buf    []byte
	r, w   int
	limits Limits
	// need is the buffered length the last incomplete parse asked for, so
	// that a large bulk is filled in few reads instead of re-parsed per read.
	need    int
	initial int
	// scan is the progress of the reply being parsed.
	scan replyScan
	// streaming: a reply is being released as it arrives (TakePartial),
	// so Fill reads in bounded steps.
	streaming bool
	// fs is the progress of a command being passed on as it arrives.
	fs frameStream
}

// shrinkAbove is the buffer size above which an empty buffer is given back.
const shrinkAbove = 1 << 20

// growStep bounds how far the buffer grows ahead of the bytes received.
const growStep = 1 << 20

// streamStep is how much a Fill reads at most while a reply is released as
// it arrives.
const streamStep = 256 << 10

// NewReader returns a Reader with an initial buffer of size bytes (grown on
// demand up to the frame size the limits allow).
func NewReader(rd io.Reader, size int, limits Limits) *Reader {
	if size < 512 {
		size = 512
	}
	if limits.MaxDepth == 0 {
		limits = defaultLimits
	}
	return &Reader{rd: rd, buf: make([]byte, size), limits: limits, initial: size}
}

// Reset makes the Reader read from rd, keeping its buffer.
func (r *Reader) Reset(rd io.Reader) {
	r.rd, r.r, r.w, r.need, r.scan, r.fs = rd, 0, 0, 0, replyScan{}, frameStream{}
}

// SetSource makes the Reader read from rd from now on, keeping the bytes
// already buffered: a connection handed from one owner to another (an
// event loop to a goroutine) loses none of the pipeline it had sent.
func (r *Reader) SetSource(rd io.Reader) { r.rd = rd }

// Offset is the position of the next unparsed byte; Rewind(Offset())
// after a Try* call un-consumes what it parsed. Valid until the next Fill.
func (r *Reader) Offset() int { return r.r }

// Rewind moves the parse position back to off, an Offset taken since the
// last Fill, so the frames after it are parsed again (by a new owner). A
// streamed command's head un-parsed this way is forgotten with its
// progress: it is returned again, whole or as a head, by the next parse.
func (r *Reader) Rewind(off int) { r.r, r.fs = off, frameStream{} }

// Buffered is the number of bytes read from the connection and not yet
// consumed. A proxy uses it to know whether more pipelined commands are
// already here (batch them) or whether it should flush and wait.
func (r *Reader) Buffered() int { return r.w - r.r }

// Fill reads once from the underlying reader, making room first. It is the
// only place the Reader blocks.
func (r *Reader) Fill() error {
	if r.r == r.w {
		r.r, r.w = 0, 0
		if len(r.buf) > shrinkAbove && r.need <= r.initial {
			// A huge frame made the buffer grow; do not keep it forever.
			r.buf = make([]byte, r.initial)
		}
	}
	want := r.need - (r.w - r.r) // bytes still missing from the frame
	if r.streaming || r.fs.active {
		want = min(want, streamStep)
	}
	if want < 512 {
		want = 512
	}
	if len(r.buf)-r.w < want {
		if r.r > 0 {
			copy(r.buf, r.buf[r.r:r.w])
			r.w -= r.r
			r.r = 0
		}
		// Room for the rest of the frame, but never more than the bytes
		// already held (or growStep): a header claiming a 512 MiB bulk
		// must not allocate 512 MiB before the payload arrives. A real
		// large frame still grows geometrically as its bytes come in.
		room := min(want, max(r.w, growStep))
		if len(r.buf)-r.w < room {
			n := r.w + room
			if d := 2 * len(r.buf); n < d && d <= r.w+max(r.w, growStep) {
				n = d
			}
			nb := make([]byte, n)
			copy(nb, r.buf[:r.w])
			r.buf = nb
		}
	}
	n, err := r.rd.Read(r.buf[r.w:])
	r.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// line returns the CRLF-terminated line starting at b[pos] (without CRLF)
// and the length consumed including CRLF.
func (r *Reader) line(b []byte, pos int) ([]byte, int, error) {
	i := bytes.IndexByte(b[pos:], '\n')
	if i < 0 {
		if len(b)-pos > r.limits.MaxInline {
			return nil, 0, protoErr("line too long")
		}
		return nil, 0, errIncomplete
	}
	if i < 2 || b[pos+i-1] != '\r' {
		return nil, 0, protoErr("line not terminated by CRLF")
	}
	return b[pos : pos+i-1], i + 1, nil
}

// parseInt parses a decimal integer without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := false
	if b[0] == '-' {
		neg, b = true, b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n < 0 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

func printable(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	return "\\x" + strconv.FormatUint(uint64(c), 16)
}

// Take returns the buffered bytes not yet parsed and consumes them. A proxy
// uses it when it stops parsing a connection and starts piping it raw (for
// pub/sub), so that no byte already read is lost.
func (r *Reader) Take() []byte {
	b := r.buf[r.r:r.w]
	r.r, r.w, r.scan = 0, 0, replyScan{}
	return b
}
