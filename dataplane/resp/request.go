package resp

import (
	"bytes"
)

// Request parsing: commands in the multibulk form clients send and in the
// inline form a terminal sends, split as Redis splits them.

// Command is one parsed client command. Args[0] is the command name. Args
// and Raw point into the Reader's buffer (or, for an inline command, into
// the Command's own).
type Command struct {
	Args [][]byte
	// Raw is the command's bytes exactly as received (for forwarding). For
	// an inline command it is re-encoded as a RESP array in the Command's
	// own buffer.
	Raw []byte
	// Argc is the number of arguments of the command, len(Args) but for a
	// streamed one.
	Argc int
	// Streamed: the command is a head (Limits.StreamAbove): Args are its
	// first arguments, all here, Raw its bytes so far, and the rest of its
	// Argc arguments is passed on with Reader.Chunk. Big is then the length
	// of the argument after Args if Raw ends with that argument's header
	// (the large value whose bytes follow), else 0.
	Streamed bool
	Big      int
	inline   []byte
	words    []byte
	ends     []int
}

// ReadCommand parses the next command, reading from the connection only when
// the buffer holds no complete command. Empty inline lines and multibulk
// headers announcing no argument are skipped as Redis does.
func (r *Reader) ReadCommand(c *Command) error {
	if r.fs.active {
		return errStreamPending
	}
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
	if r.fs.active {
		return false, errStreamPending
	}
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
	c.Streamed, c.Big = false, 0
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
	// above is the size from which a command is streamed (0: never; nor
	// the command HoldWhole asked for whole).
	above := r.limits.StreamAbove
	if r.fs.hold {
		above = 0
	}
	for k := int64(0); k < count; k++ {
		j := cIndex(b[pos:], '\r')
		if j < 0 {
			if len(b)-pos > r.limits.MaxInline {
				return 0, protoErr("too big bulk count string")
			}
			if above > 0 && k > 0 && pos > above {
				return r.streamHead(c, pos, count, 0, count-k)
			}
			r.need = len(b) + 1
			return 0, errIncomplete
		}
		if pos+j+2 > len(b) {
			if above > 0 && k > 0 && pos > above {
				return r.streamHead(c, pos, count, 0, count-k)
			}
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
		hdr := pos
		pos += j + 2
		end := pos + int(size)
		// The two bytes after the bulk are skipped unread, as Redis does.
		if end+2 > len(b) {
			switch {
			case above > 0 && k > 0 && size > int64(above):
				// A large value: its header goes with the head, its
				// bytes are streamed.
				c.Big = int(size)
				return r.streamHead(c, pos, count, size+2, count-k-1)
			case above > 0 && k > 0 && hdr > above:
				return r.streamHead(c, hdr, count, 0, count-k)
			}
			r.need = end + 2
			return 0, errIncomplete
		}
		c.Args = append(c.Args, b[pos:end:end])
		pos = end + 2
	}
	c.Raw = b[:pos:pos]
	c.Argc = len(c.Args)
	r.r += pos
	r.need = 0
	r.fs.hold = false
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
	c.Argc = len(c.Args)
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
