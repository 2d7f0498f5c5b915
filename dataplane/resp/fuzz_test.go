package resp

import (
	"bytes"
	"io"
	"testing"
)

// FuzzReadCommand checks that no input panics or loops, and that every
// command the reader accepts re-encodes to a frame that parses to the same
// arguments (what the proxy forwards is what the client meant).
func FuzzReadCommand(f *testing.F) {
	for _, s := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "PING\r\n", "*1\r\n$-1\r\n", "*-1\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", "*1\r\n$4\r\nPI", "$3\r\nfoo\r\n", "\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lim := Limits{MaxBulk: 1 << 16, MaxArgs: 1024, MaxInline: 1 << 12, MaxDepth: 16}
		r := NewReader(bytes.NewReader(in), 16, lim)
		var c Command
		for n := 0; n < 1000; n++ {
			err := r.ReadCommand(&c)
			if err != nil {
				if err != io.EOF && !IsProtocolError(err) && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				return
			}
			enc := AppendArgs(nil, c.Args)
			r2 := NewReader(bytes.NewReader(enc), 16, DefaultLimits())
			var c2 Command
			if err := r2.ReadCommand(&c2); err != nil {
				t.Fatalf("re-encoded command does not parse: %v", err)
			}
			if len(c2.Args) != len(c.Args) {
				t.Fatalf("re-encoded arity %d != %d", len(c2.Args), len(c.Args))
			}
			for i := range c.Args {
				if !bytes.Equal(c.Args[i], c2.Args[i]) {
					t.Fatalf("arg %d changed", i)
				}
			}
		}
	})
}

// FuzzReadReply checks that reply parsing never panics and that the frames
// it returns tile the input exactly (a proxy forwarding them loses nothing).
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n", "%1\r\n+a\r\n#t\r\n", "|1\r\n+a\r\n+b\r\n:1\r\n",
		">3\r\n+message\r\n+c\r\n$1\r\nx\r\n", "!3\r\nerr\r\n", "*1\r\n*1\r\n*1\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lim := Limits{MaxBulk: 1 << 16, MaxArgs: 1024, MaxInline: 1 << 12, MaxDepth: 16}
		r := NewReader(bytes.NewReader(in), 16, lim)
		var p Reply
		var got []byte
		for {
			err := r.ReadReply(&p)
			if err != nil {
				if err != io.EOF && !IsProtocolError(err) {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				if err == io.EOF && !bytes.HasPrefix(in, got) {
					t.Fatalf("frames do not tile the input")
				}
				return
			}
			got = append(got, p.Raw...)
		}
	})
}

// FuzzTakePartial reads replies in small pieces, releasing every
// incomplete reply's scanned bytes as soon as there are any: the pieces
// and the rests must tile the input exactly, as FuzzReadReply's frames do.
func FuzzTakePartial(f *testing.F) {
	for _, s := range []string{
		"$10\r\n0123456789\r\n+OK\r\n", "*2\r\n$5\r\nabcde\r\n*1\r\n$3\r\nxyz\r\n", "|1\r\n+a\r\n+b\r\n$4\r\nabcd\r\n",
		">2\r\n+x\r\n$6\r\nyyyyyy\r\n", "$3\r\nab", "*1\r\n$2\r\nabXY",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		lim := Limits{MaxBulk: 1 << 16, MaxArgs: 1024, MaxInline: 1 << 12, MaxDepth: 16}
		r := NewReader(&chunkReader{data: in, n: int(chunk%16) + 1}, 16, lim)
		var got []byte
		var p Reply
		for {
			ok, err := r.TryReply(&p)
			if err != nil {
				if !IsProtocolError(err) {
					t.Fatalf("unexpected error %T: %v", err, err)
				}
				return
			}
			if ok {
				got = append(got, p.Raw...)
				continue
			}
			got = append(got, r.TakePartial()...)
			if err := r.Fill(); err != nil {
				if err == io.EOF && !bytes.HasPrefix(in, got) {
					t.Fatalf("pieces do not tile the input: %q vs %q", got, in)
				}
				return
			}
		}
	})
}
