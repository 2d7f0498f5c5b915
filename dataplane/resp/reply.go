package resp

// Reply parsing: replies of every RESP2 and RESP3 type, found whole or, for
// a large one, passed on in parts as they arrive.

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
