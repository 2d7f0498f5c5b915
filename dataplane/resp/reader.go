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
	// MaxArgs is the greatest number of arguments in one command.
	MaxArgs int
	// MaxInline is the greatest length of an inline command or of a simple
	// line (status, error, number) in a reply.
	MaxInline int
	// MaxDepth is the greatest nesting of aggregate replies.
	MaxDepth int
}

// defaultLimits mirror Redis' own defaults. It is a constant in all but
// name: nothing assigns it, and DefaultLimits hands out copies.
var defaultLimits = Limits{MaxBulk: 512 << 20, MaxArgs: 1 << 20, MaxInline: 64 << 10, MaxDepth: 64}

// DefaultLimits returns Redis' own defaults. A function, not a variable, so
// no importer can change the process-wide default.
func DefaultLimits() Limits { return defaultLimits }

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
}

// shrinkAbove is the buffer size above which an empty buffer is given back.
const shrinkAbove = 1 << 20

// growStep bounds how far the buffer grows ahead of the bytes received.
const growStep = 1 << 20

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
func (r *Reader) Reset(rd io.Reader) { r.rd, r.r, r.w, r.need = rd, 0, 0, 0 }

// SetSource makes the Reader read from rd from now on, keeping the bytes
// already buffered: a connection handed from one owner to another (an
// event loop to a goroutine) loses none of the pipeline it had sent.
func (r *Reader) SetSource(rd io.Reader) { r.rd = rd }

// Offset is the position of the next unparsed byte; Rewind(Offset())
// after a Try* call un-consumes what it parsed. Valid until the next Fill.
func (r *Reader) Offset() int { return r.r }

// Rewind moves the parse position back to off, an Offset taken since the
// last Fill, so the frames after it are parsed again (by a new owner).
func (r *Reader) Rewind(off int) { r.r = off }

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

// Command is one parsed client command. Args[0] is the command name. Args
// and Raw point into the Reader's buffer.
type Command struct {
	Args [][]byte
	// Raw is the command's bytes exactly as received (for forwarding). For
	// an inline command it is re-encoded as a RESP array in Inline's buffer.
	Raw    []byte
	inline []byte
}

// ReadCommand parses the next command, reading from the connection only when
// the buffer holds no complete command. Empty inline lines are skipped as
// Redis does.
func (r *Reader) ReadCommand(c *Command) error {
	for {
		if r.r < r.w {
			n, err := r.parseCommand(c)
			if err == nil {
				if n == 0 { // empty inline line
					continue
				}
				return nil
			}
			if err != errIncomplete {
				return err
			}
		}
		if err := r.Fill(); err != nil {
			return err
		}
	}
}

// TryCommand parses the next command only if it is wholly buffered; it
// reports false (and consumes nothing) otherwise. Proxies use it to gather a
// pipeline without blocking.
func (r *Reader) TryCommand(c *Command) (bool, error) {
	for r.r < r.w {
		n, err := r.parseCommand(c)
		if err == errIncomplete {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}

// parseCommand parses at r.r; on success it advances r.r and returns the
// consumed length (0 for a skipped empty inline line).
func (r *Reader) parseCommand(c *Command) (int, error) {
	r.need = 0
	b := r.buf[r.r:r.w]
	if b[0] != '*' {
		return r.parseInline(c, b)
	}
	line, n, err := r.line(b, 0)
	if err != nil {
		return 0, err
	}
	count, ok := parseInt(line[1:])
	if !ok {
		return 0, protoErr("invalid multibulk length")
	}
	if count > int64(r.limits.MaxArgs) {
		return 0, protoErr("invalid multibulk length")
	}
	c.Args = c.Args[:0]
	if count <= 0 { // Redis ignores "*0" and "*-1" from clients
		r.r += n
		return 0, nil
	}
	pos := n
	for i := int64(0); i < count; i++ {
		if pos >= len(b) {
			r.need = pos + 4
			return 0, errIncomplete
		}
		if b[pos] != '$' {
			return 0, protoErr("expected '$', got '%s'", printable(b[pos]))
		}
		line, n, err := r.line(b, pos)
		if err != nil {
			if err == errIncomplete {
				r.need = pos + 32
			}
			return 0, err
		}
		size, ok := parseInt(line[1:])
		if !ok || size < 0 || size > int64(r.limits.MaxBulk) {
			return 0, protoErr("invalid bulk length")
		}
		pos += n
		end := pos + int(size)
		if end+2 > len(b) {
			r.need = end + 2
			return 0, errIncomplete
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return 0, protoErr("bulk string not terminated by CRLF")
		}
		c.Args = append(c.Args, b[pos:end:end])
		pos = end + 2
	}
	c.Raw = b[:pos:pos]
	r.r += pos
	r.need = 0
	return pos, nil
}

// parseInline parses a space-separated command line (telnet style).
func (r *Reader) parseInline(c *Command, b []byte) (int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > r.limits.MaxInline {
			return 0, protoErr("too big inline request")
		}
		r.need = len(b) + 1
		return 0, errIncomplete
	}
	line := b[:i]
	consumed := i + 1
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	c.Args = c.Args[:0]
	for _, f := range bytes.Fields(line) {
		c.Args = append(c.Args, f)
	}
	r.r += consumed
	r.need = 0
	if len(c.Args) == 0 {
		return 0, nil
	}
	// Re-encode so that the proxy always forwards RESP arrays.
	c.inline = AppendArgs(c.inline[:0], c.Args)
	c.Raw = c.inline
	return consumed, nil
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

// Reply is one parsed reply. Raw points into the Reader's buffer.
type Reply struct {
	// Type is the first byte: '+', '-', ':', '$', '*', and for RESP3 '_',
	// '#', ',', '(', '!', '=', '%', '~', '>' (attributes '|' are folded into
	// the reply they annotate).
	Type byte
	// Raw is the whole reply, attributes included.
	Raw []byte
	// Line is the header line after the type byte (the status or error text,
	// the number, the length).
	Line []byte
}

// IsPush reports whether the reply is an out-of-band RESP3 push (which does
// not answer a command).
func (p *Reply) IsPush() bool { return p.Type == '>' }

// IsError reports whether the reply is an error ('-' or RESP3 '!').
func (p *Reply) IsError() bool { return p.Type == '-' || p.Type == '!' }

// ReadReply parses the next reply, reading as needed.
func (r *Reader) ReadReply(p *Reply) error {
	for {
		if r.r < r.w {
			err := r.parseReply(p)
			if err == nil {
				return nil
			}
			if err != errIncomplete {
				return err
			}
		}
		if err := r.Fill(); err != nil {
			return err
		}
	}
}

// TryReply parses the next reply only if it is wholly buffered; it reports
// false (and consumes nothing) otherwise. An event loop reads once per
// readiness event, then takes every complete reply.
func (r *Reader) TryReply(p *Reply) (bool, error) {
	if r.r == r.w {
		return false, nil
	}
	err := r.parseReply(p)
	if err == errIncomplete {
		return false, nil
	}
	return err == nil, err
}

func (r *Reader) parseReply(p *Reply) error {
	r.need = 0
	b := r.buf[r.r:r.w]
	start := 0
	for {
		if start >= len(b) {
			return errIncomplete
		}
		if b[start] != '|' {
			break
		}
		// Attribute: a map preceding the actual reply.
		end, err := r.skip(b, start, 0)
		if err != nil {
			return err
		}
		start = end
	}
	end, err := r.skip(b, start, 0)
	if err != nil {
		return err
	}
	line, _, _ := r.line(b, start)
	p.Type = b[start]
	p.Line = line[1:]
	p.Raw = b[:end:end]
	r.r += end
	r.need = 0
	return nil
}

// skip returns the end offset of the value starting at b[pos].
func (r *Reader) skip(b []byte, pos, depth int) (int, error) {
	if depth > r.limits.MaxDepth {
		return 0, protoErr("reply nested too deeply")
	}
	if pos >= len(b) {
		r.need = pos + 4
		return 0, errIncomplete
	}
	line, n, err := r.line(b, pos)
	if err != nil {
		if err == errIncomplete {
			r.need = pos + 64
		}
		return 0, err
	}
	t := line[0]
	switch t {
	case '+', '-', ':', ',', '(', '_', '#':
		return pos + n, nil
	case '$', '!', '=':
		if len(line) == 3 && line[1] == '-' && line[2] == '1' {
			return pos + n, nil // RESP2 null bulk
		}
		if len(line) == 2 && line[1] == '?' {
			return 0, protoErr("streamed strings are not supported")
		}
		size, ok := parseInt(line[1:])
		if !ok || size < 0 || size > int64(r.limits.MaxBulk) {
			return 0, protoErr("invalid bulk length")
		}
		end := pos + n + int(size)
		if end+2 > len(b) {
			r.need = end + 2
			return 0, errIncomplete
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return 0, protoErr("bulk string not terminated by CRLF")
		}
		return end + 2, nil
	case '*', '~', '>', '%', '|':
		if len(line) == 3 && line[1] == '-' && line[2] == '1' {
			return pos + n, nil // RESP2 null array
		}
		count, ok := parseInt(line[1:])
		if !ok || count < 0 || count > int64(r.limits.MaxArgs) {
			return 0, protoErr("invalid aggregate length")
		}
		if t == '%' || t == '|' {
			count *= 2
		}
		p := pos + n
		for i := int64(0); i < count; i++ {
			e, err := r.skip(b, p, depth+1)
			if err != nil {
				return 0, err
			}
			p = e
		}
		if t == '|' && depth > 0 {
			// A nested attribute annotates the value that follows it (at
			// the top, parseReply steps over attributes itself to find
			// the reply's type).
			return r.skip(b, p, depth+1)
		}
		return p, nil
	default:
		return 0, protoErr("unknown reply type '%s'", printable(t))
	}
}

// Take returns the buffered bytes not yet parsed and consumes them. A proxy
// uses it when it stops parsing a connection and starts piping it raw (for
// pub/sub), so that no byte already read is lost.
func (r *Reader) Take() []byte {
	b := r.buf[r.r:r.w]
	r.r, r.w = 0, 0
	return b
}
