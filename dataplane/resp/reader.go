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
func (r *Reader) Reset(rd io.Reader) { r.rd, r.r, r.w, r.need, r.scan = rd, 0, 0, 0, replyScan{} }

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
	if r.streaming {
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

// Command is one parsed client command. Args[0] is the command name. Args
// and Raw point into the Reader's buffer (or, for an inline command, into
// the Command's own).
type Command struct {
	Args [][]byte
	// Raw is the command's bytes exactly as received (for forwarding). For
	// an inline command it is re-encoded as a RESP array in the Command's
	// own buffer.
	Raw    []byte
	inline []byte
	words  []byte
	ends   []int
}

// ReadCommand parses the next command, reading from the connection only when
// the buffer holds no complete command. Empty inline lines and multibulk
// headers announcing no argument are skipped as Redis does.
func (r *Reader) ReadCommand(c *Command) error {
	for {
		if r.r < r.w {
			n, err := r.parseCommand(c)
			if err == nil {
				if n == 0 { // nothing to run
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

// parseCommand parses at r.r the way Redis 7 does (processMultibulkBuffer
// and processInlineBuffer in networking.c), so that the proxy accepts
// exactly what Redis accepts, splits inline commands the same way, and
// refuses the rest with Redis' own error text. On success it advances r.r
// and returns the consumed length (0 for a frame that carries no command).
func (r *Reader) parseCommand(c *Command) (int, error) {
	r.need = 0
	b := r.buf[r.r:r.w]
	if b[0] != '*' {
		return r.parseInline(c, b)
	}
	// The count ends at the first CR; Redis takes the byte after it as the
	// LF without looking at it.
	i := cIndex(b, '\r')
	if i < 0 {
		if len(b) > r.limits.MaxInline {
			return 0, protoErr("too big mbulk count string")
		}
		r.need = len(b) + 1
		return 0, errIncomplete
	}
	if i+2 > len(b) {
		r.need = i + 2
		return 0, errIncomplete
	}
	count, ok := string2ll(b[1:i])
	if !ok || count > int64(r.limits.MaxArgs) {
		return 0, protoErr("invalid multibulk length")
	}
	pos := i + 2
	c.Args = c.Args[:0]
	if count <= 0 { // Redis ignores "*0" and "*-1" from clients
		r.r += pos
		return 0, nil
	}
	for k := int64(0); k < count; k++ {
		j := cIndex(b[pos:], '\r')
		if j < 0 {
			if len(b)-pos > r.limits.MaxInline {
				return 0, protoErr("too big bulk count string")
			}
			r.need = len(b) + 1
			return 0, errIncomplete
		}
		if pos+j+2 > len(b) {
			r.need = pos + j + 2
			return 0, errIncomplete
		}
		if b[pos] != '$' {
			return 0, expectedDollar(b[pos])
		}
		size, ok := string2ll(b[pos+1 : pos+j])
		if !ok || size < 0 || size > int64(r.limits.MaxBulk) {
			return 0, protoErr("invalid bulk length")
		}
		pos += j + 2
		end := pos + int(size)
		// The two bytes after the bulk are skipped unread, as Redis does.
		if end+2 > len(b) {
			r.need = end + 2
			return 0, errIncomplete
		}
		c.Args = append(c.Args, b[pos:end:end])
		pos = end + 2
	}
	c.Raw = b[:pos:pos]
	r.r += pos
	r.need = 0
	return pos, nil
}

// expectedDollar is Redis' error for a multibulk element that is not a bulk
// string. Redis formats it with %c and then cuts the message at a NUL byte
// and turns CR and LF into spaces (AppendError does the latter).
func expectedDollar(c byte) error {
	if c == 0 {
		return &ProtocolError{Msg: "expected '$', got '"}
	}
	return &ProtocolError{Msg: "expected '$', got '" + string([]byte{c}) + "'"}
}

// parseInline parses a command line (telnet style) the way Redis does: the
// line ends at LF (a CR before it is dropped) and is split by sdssplitargs'
// rules (quotes, escapes, a NUL byte ending the line).
func (r *Reader) parseInline(c *Command, b []byte) (int, error) {
	i := cIndex(b, '\n')
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
	if !c.splitArgs(line) {
		return 0, protoErr("unbalanced quotes in request")
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

// splitArgs splits an inline line into c.Args with the rules of Redis'
// sdssplitargs: blanks separate words; "double quotes" take \xHH and the
// escapes \n \r \t \b \a (any other escaped byte stands for itself);
// 'single quotes' take \' only; a closing quote must be followed by a blank
// or the end; an unterminated quote is an error (false). The line is read
// as a C string: a NUL byte ends it.
func (c *Command) splitArgs(line []byte) bool {
	if n := bytes.IndexByte(line, 0); n >= 0 {
		line = line[:n]
	}
	c.words, c.ends = c.words[:0], c.ends[:0]
	p := 0
	at := func(i int) byte { // the byte at i, or NUL past the end
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	for {
		for p < len(line) && isCSpace(line[p]) {
			p++
		}
		if p >= len(line) {
			break
		}
		inq, insq, done := false, false, false
		for !done {
			ch := at(p)
			switch {
			case inq:
				switch {
				case ch == '\\' && at(p+1) == 'x' && isHex(at(p+2)) && isHex(at(p+3)):
					c.words = append(c.words, unhex(at(p+2))<<4|unhex(at(p+3)))
					p += 3
				case ch == '\\' && at(p+1) != 0:
					p++
					e := line[p]
					switch e {
					case 'n':
						e = '\n'
					case 'r':
						e = '\r'
					case 't':
						e = '\t'
					case 'b':
						e = '\b'
					case 'a':
						e = '\a'
					}
					c.words = append(c.words, e)
				case ch == '"':
					if n := at(p + 1); n != 0 && !isCSpace(n) {
						return false
					}
					done = true
				case ch == 0:
					return false
				default:
					c.words = append(c.words, ch)
				}
			case insq:
				switch {
				case ch == '\\' && at(p+1) == '\'':
					p++
					c.words = append(c.words, '\'')
				case ch == '\'':
					if n := at(p + 1); n != 0 && !isCSpace(n) {
						return false
					}
					done = true
				case ch == 0:
					return false
				default:
					c.words = append(c.words, ch)
				}
			default:
				switch ch {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					c.words = append(c.words, ch)
				}
			}
			if p < len(line) {
				p++
			}
		}
		c.ends = append(c.ends, len(c.words))
	}
	c.Args = c.Args[:0]
	from := 0
	for _, end := range c.ends {
		c.Args = append(c.Args, c.words[from:end:end])
		from = end
	}
	return true
}

// cIndex is the index of c in b as Redis' strchr on its query buffer finds
// it: a NUL byte before it hides it (-1), so such a frame waits for more
// bytes until it is too long.
func cIndex(b []byte, c byte) int {
	for i, x := range b {
		switch x {
		case c:
			return i
		case 0:
			return -1
		}
	}
	return -1
}

// isCSpace is C's isspace in the C locale.
func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// string2ll parses a decimal integer exactly as Redis' string2ll does: no
// sign but '-', no leading zero (but "0" itself), no spaces, at most 20
// characters, no overflow.
func string2ll(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) >= 21 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	if b[0] == '-' {
		neg, b = true, b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (1<<64-1)/10 {
			return 0, false
		}
		v *= 10
		if v > 1<<64-1-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
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
	// Partial: the reply's first bytes were released by TakePartial; Raw
	// holds the rest.
	Partial bool
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
	b := r.buf[r.r:r.w]
	st := &r.scan
	for {
		if !st.inValue {
			// A top-level value starts here: an attribute (its entries
			// come first, then the reply it annotates) or the reply.
			if st.pos >= len(b) {
				r.need = st.pos + 4
				return errIncomplete
			}
			st.left, st.inValue, st.attr, st.valueAt = 1, true, b[st.pos] == '|', st.pos
			if !st.attr {
				st.typeAt, st.typed = st.pos, true
			}
		}
		for st.left > 0 {
			if st.bulkEnd != 0 {
				// Inside a bulk payload whose header was scanned.
				end := max(st.bulkEnd, 0)
				if end > len(b) {
					r.need = end
					return errIncomplete
				}
				if end >= 2 && (b[end-2] != '\r' || b[end-1] != '\n') {
					return protoErr("bulk string not terminated by CRLF")
				}
				st.pos, st.bulkEnd = end, 0
				st.left--
				continue
			}
			next, add, err := r.element(b, st.pos, st.attr && st.pos == st.valueAt)
			if err != nil {
				return err
			}
			if add < 0 {
				// A bulk whose payload has not all come: resume inside it.
				st.bulkEnd = int(-add)
				st.pos = next
				continue
			}
			st.left += add - 1
			st.pos = next
		}
		st.inValue = false
		if st.attr {
			continue
		}
		end := st.pos
		if st.saved {
			p.Type, p.Line = st.typ, st.line
		} else {
			line, _, _ := r.line(b, st.typeAt)
			p.Type, p.Line = b[st.typeAt], line[1:]
		}
		p.Partial = st.taken > 0
		p.Raw = b[:end:end]
		r.r += end
		r.need = 0
		r.scan = replyScan{}
		r.streaming = false
		return nil
	}
}

// TakePartial releases the received part of the reply being read (after
// TryReply reported it incomplete) that the scanner has gone past, so a
// proxy can send a large reply on as it arrives instead of holding it
// whole: the bytes returned are valid until the next Fill. The reply, once
// complete, comes from TryReply or ReadReply with only its remaining bytes
// in Raw and Partial set. Fill then reads in bounded steps rather than
// growing the buffer to the reply's size.
func (r *Reader) TakePartial() []byte {
	st := &r.scan
	if !st.inValue && st.pos == 0 {
		return nil
	}
	safe := st.pos
	if st.bulkEnd > 0 {
		safe = min(st.bulkEnd, r.w-r.r)
	}
	if safe <= 0 {
		return nil
	}
	b := r.buf[r.r : r.r+safe]
	if st.typed && !st.saved && st.typeAt < safe {
		// Keep the reply's type and header: they are about to be released.
		if line, _, err := r.line(r.buf[r.r:r.w], st.typeAt); err == nil {
			st.typ, st.line, st.saved = line[0], append([]byte(nil), line[1:]...), true
		}
	}
	r.r += safe
	st.pos -= safe
	st.valueAt -= safe
	st.typeAt -= safe
	if st.bulkEnd > 0 {
		st.bulkEnd -= safe
		if st.bulkEnd == 0 {
			st.bulkEnd = -1 // the payload is all released; its CRLF too
		}
	}
	st.taken += safe
	r.streaming = true
	return b
}

// Pending is the number of bytes buffered for the reply being read.
func (r *Reader) Pending() int { return r.w - r.r }

// replyScan is the progress of a reply being scanned: a large reply that
// arrives over many reads is scanned once, resumed where it stopped, not
// once per read. Offsets are from the start of the reply's unreleased
// bytes (r.r).
type replyScan struct {
	// pos is the offset of the next element to scan.
	pos int
	// left is the number of elements still to scan in the current value.
	left int64
	// inValue: a top-level value is being scanned; attr: it is an
	// attribute (the reply follows it).
	inValue, attr bool
	// valueAt is where the top-level value being scanned began; typeAt is
	// the offset of the reply's own first byte (after any attribute).
	valueAt, typeAt int
	// bulkEnd, when not 0, is where the payload (and CRLF) of the bulk
	// being scanned ends (-1: all of it was released): its header is
	// scanned, its bytes not all here.
	bulkEnd int
	// typed: typeAt is known (the reply itself has begun).
	typed bool
	// taken counts the bytes released by TakePartial; typ and line are the
	// reply's type and header, saved when they were released.
	taken int
	saved bool
	typ   byte
	line  []byte
}

// maxAggregate and maxBulkReply bound what one reply header may claim,
// only so that the arithmetic cannot overflow; memory bounds the rest.
const (
	maxAggregate = 1 << 40
	maxBulkReply = 1 << 50
)

// element scans the element at b[pos]: its header line and, for a bulk,
// its payload. next is the offset after what it scanned; add the number
// of elements it announces (an aggregate's entries; a nested attribute's
// entries and the value it annotates; topAttr: the top-level attribute,
// whose annotated reply is scanned as the next top-level value). The
// nesting depth does not matter: only the count of elements still owed
// does, so any depth Redis can produce is relayed.
func (r *Reader) element(b []byte, pos int, topAttr bool) (next int, add int64, err error) {
	if pos >= len(b) {
		r.need = pos + 4
		return 0, 0, errIncomplete
	}
	line, n, err := r.line(b, pos)
	if err != nil {
		if err == errIncomplete {
			r.need = len(b) + 1
		}
		return 0, 0, err
	}
	t := line[0]
	switch t {
	case '+', '-', ':', ',', '(', '_', '#':
		return pos + n, 0, nil
	case '$', '!', '=':
		if len(line) == 3 && line[1] == '-' && line[2] == '1' {
			return pos + n, 0, nil // RESP2 null bulk
		}
		if len(line) == 2 && line[1] == '?' {
			return 0, 0, protoErr("streamed strings are not supported")
		}
		size, ok := parseInt(line[1:])
		if !ok || size < 0 || size > int64(r.limits.MaxBulk) || size > maxBulkReply {
			return 0, 0, protoErr("invalid bulk length")
		}
		end := pos + n + int(size)
		if end+2 > len(b) {
			// The payload is not all here: the caller resumes inside it
			// (a negative add carries where it ends).
			return pos + n, -int64(end + 2), nil
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return 0, 0, protoErr("bulk string not terminated by CRLF")
		}
		return end + 2, 0, nil
	case '*', '~', '>', '%', '|':
		if len(line) == 3 && line[1] == '-' && line[2] == '1' {
			return pos + n, 0, nil // RESP2 null array
		}
		count, ok := parseInt(line[1:])
		if !ok || count < 0 || count > int64(r.limits.MaxArgs) || count > maxAggregate {
			return 0, 0, protoErr("invalid aggregate length")
		}
		if t == '%' || t == '|' {
			count *= 2
		}
		if t == '|' && !topAttr {
			count++ // a nested attribute annotates the value after it
		}
		return pos + n, count, nil
	}
	return 0, 0, protoErr("unknown reply type '%s'", printable(t))
}

// Take returns the buffered bytes not yet parsed and consumes them. A proxy
// uses it when it stops parsing a connection and starts piping it raw (for
// pub/sub), so that no byte already read is lost.
func (r *Reader) Take() []byte {
	b := r.buf[r.r:r.w]
	r.r, r.w, r.scan = 0, 0, replyScan{}
	return b
}
