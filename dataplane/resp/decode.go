package resp

import (
	"bytes"
)

// Error is an error reply ('-' or RESP3 '!') decoded as a value. It is a
// value, not a failure of Decode: a reply can legitimately be an error, and
// an aggregate can hold error elements (EXEC's reply, for one).
type Error string

func (e Error) Error() string { return string(e) }

// Push is a RESP3 out-of-band push message ('>'), kept apart from arrays so
// that a reader can tell an invalidation from a reply.
type Push []any

// Decode parses one whole reply at the start of b into Go values and returns
// the number of bytes it took. It is for the few replies a component reads
// for itself (CLUSTER SLOTS, client-tracking pushes), never for the
// forwarding path, which keeps raw bytes.
//
// Values: bulk and verbatim strings are []byte (copied out of b); simple
// strings, doubles, big numbers and booleans are their text as string;
// integers are int64; nulls are nil; arrays and sets are []any; maps are a
// flat []any of key, value, key, value; pushes are Push; error replies are
// Error. Attributes are skipped.
//
// Every length on the wire is checked against lim and against the bytes
// actually present before anything is allocated, so a header alone cannot
// make Decode allocate. A truncated or malformed frame is a *ProtocolError.
func Decode(b []byte, lim Limits) (v any, n int, err error) {
	if lim.MaxDepth == 0 {
		lim = defaultLimits
	}
	return decodeAt(b, 0, 0, lim)
}

// ReadValue reads the next reply (blocking as ReadReply does) and decodes it.
// The Reader's limits bound it.
func (r *Reader) ReadValue() (any, error) {
	var p Reply
	if err := r.ReadReply(&p); err != nil {
		return nil, err
	}
	v, _, err := decodeAt(p.Raw, 0, 0, r.limits)
	return v, err
}

// minElem is the shortest encoding of one element ("_\r\n"): an aggregate
// claiming more elements than the remaining bytes can hold is truncated,
// which bounds its preallocation by the input's size.
const minElem = 3

func decodeAt(b []byte, pos, depth int, lim Limits) (any, int, error) {
	if depth > lim.MaxDepth {
		return nil, 0, protoErr("reply nested too deeply")
	}
	if pos >= len(b) {
		return nil, 0, protoErr("truncated reply")
	}
	i := bytes.IndexByte(b[pos:], '\n')
	if i < 0 {
		return nil, 0, protoErr("truncated reply")
	}
	if i < 2 || b[pos+i-1] != '\r' {
		return nil, 0, protoErr("line not terminated by CRLF")
	}
	if i-1 > lim.MaxInline {
		return nil, 0, protoErr("line too long")
	}
	t, line, next := b[pos], b[pos+1:pos+i-1], pos+i+1
	switch t {
	case '+', ',', '(', '#':
		return string(line), next, nil
	case '-':
		return Error(line), next, nil
	case ':':
		n, ok := parseInt(line)
		if !ok {
			return nil, 0, protoErr("invalid integer")
		}
		return n, next, nil
	case '_':
		return nil, next, nil
	case '$', '=', '!':
		if string(line) == "-1" {
			return nil, next, nil
		}
		size, ok := parseInt(line)
		if !ok || size < 0 || size > int64(lim.MaxBulk) {
			return nil, 0, protoErr("invalid bulk length")
		}
		end := next + int(size)
		if end+2 > len(b) || end < next {
			return nil, 0, protoErr("truncated reply")
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0, protoErr("bulk string not terminated by CRLF")
		}
		s := bytes.Clone(b[next:end])
		if s == nil {
			s = []byte{}
		}
		if t == '!' {
			return Error(s), end + 2, nil
		}
		return s, end + 2, nil
	case '*', '~', '>', '%', '|':
		if string(line) == "-1" {
			return nil, next, nil
		}
		count, ok := parseInt(line)
		if !ok || count < 0 || count > int64(lim.MaxArgs) {
			return nil, 0, protoErr("invalid aggregate length")
		}
		if t == '%' || t == '|' {
			count *= 2
		}
		if count > int64(len(b)-next)/minElem {
			return nil, 0, protoErr("truncated reply")
		}
		out := make([]any, 0, int(count))
		for k := int64(0); k < count; k++ {
			v, e, err := decodeAt(b, next, depth+1, lim)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, v)
			next = e
		}
		switch t {
		case '>':
			return Push(out), next, nil
		case '|':
			// An attribute annotates the reply that follows it.
			return decodeAt(b, next, depth+1, lim)
		}
		return out, next, nil
	}
	return nil, 0, protoErr("unknown reply type '%s'", printable(t))
}
