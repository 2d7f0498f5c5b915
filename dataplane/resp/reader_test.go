package resp

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// oneByteReader returns one byte per Read, to exercise every split point.
type oneByteReader struct{ b []byte }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(o.b) == 0 {
		return 0, io.EOF
	}
	p[0] = o.b[0]
	o.b = o.b[1:]
	return 1, nil
}

func readAll(t *testing.T, rd io.Reader) ([][]string, [][]byte, error) {
	t.Helper()
	r := NewReader(rd, 16, DefaultLimits())
	var got [][]string
	var raws [][]byte
	var c Command
	for {
		if err := r.ReadCommand(&c); err != nil {
			if err == io.EOF {
				return got, raws, nil
			}
			return got, raws, err
		}
		var args []string
		for _, a := range c.Args {
			args = append(args, string(a))
		}
		got = append(got, args)
		raws = append(raws, append([]byte(nil), c.Raw...))
	}
}

func TestReadCommand(t *testing.T) {
	big := strings.Repeat("v", 100000)
	tests := map[string]struct {
		in   string
		want [][]string
	}{
		"one":       {in: "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", want: [][]string{{"GET", "k"}}},
		"pipeline":  {in: "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", want: [][]string{{"PING"}, {"SET", "k", ""}}},
		"inline":    {in: "set k  v\r\n\r\nget k\n", want: [][]string{{"set", "k", "v"}, {"get", "k"}}},
		"binary":    {in: "*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n", want: [][]string{{"GET", "a\r\nb"}}},
		"empty arr": {in: "*0\r\n*1\r\n$4\r\nPING\r\n", want: [][]string{{"PING"}}},
		"big":       {in: "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n" + big + "\r\n", want: [][]string{{"SET", "k", big}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, rd := range []io.Reader{strings.NewReader(tc.in), &oneByteReader{[]byte(tc.in)}} {
				got, _, err := readAll(t, rd)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			}
		})
	}
}

func TestReadCommandRawForwardsVerbatim(t *testing.T) {
	in := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\nget k\r\n"
	_, raws, err := readAll(t, strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "*2\r\n$3\r\nget\r\n$1\r\nk\r\n"}
	for i := range want {
		if string(raws[i]) != want[i] {
			t.Errorf("raw %d = %q, want %q", i, raws[i], want[i])
		}
	}
}

func TestReadCommandMalformed(t *testing.T) {
	tests := map[string]string{
		"bad count":      "*x\r\n",
		"bad bulk type":  "*1\r\n+PING\r\n",
		"neg bulk":       "*1\r\n$-5\r\n",
		"huge count":     "*99999999999\r\n",
		"leading zero":   "*1\r\n$04\r\nPING\r\n",
		"plus sign":      "*+1\r\n",
		"bulk too large": "*1\r\n$999999999999\r\n",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := readAll(t, strings.NewReader(in))
			if !IsProtocolError(err) {
				t.Fatalf("got %v, want a protocol error", err)
			}
		})
	}
}

func TestTryCommandDoesNotBlock(t *testing.T) {
	r := NewReader(strings.NewReader("*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI"), 64, DefaultLimits())
	var c Command
	if err := r.ReadCommand(&c); err != nil {
		t.Fatal(err)
	}
	ok, err := r.TryCommand(&c)
	if ok || err != nil {
		t.Fatalf("TryCommand on a partial frame = %v, %v", ok, err)
	}
	if r.Buffered() == 0 {
		t.Fatal("partial frame was consumed")
	}
}

func TestReadReply(t *testing.T) {
	replies := []string{
		"+OK\r\n", "-ERR x\r\n", ":12\r\n", "$-1\r\n", "$3\r\nabc\r\n", "*-1\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "_\r\n", "#t\r\n", ",1.5\r\n", "(123\r\n",
		"!3\r\nerr\r\n", "=7\r\ntxt:abc\r\n", "%1\r\n+k\r\n:1\r\n", "~1\r\n+a\r\n",
		">2\r\n+message\r\n+x\r\n", "|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
	}
	in := strings.Join(replies, "")
	for _, rd := range []io.Reader{strings.NewReader(in), &oneByteReader{[]byte(in)}} {
		r := NewReader(rd, 16, DefaultLimits())
		var p Reply
		for i, want := range replies {
			if err := r.ReadReply(&p); err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			if string(p.Raw) != want {
				t.Fatalf("reply %d = %q, want %q", i, p.Raw, want)
			}
		}
		if err := r.ReadReply(&p); err != io.EOF {
			t.Fatalf("after last reply: %v, want EOF", err)
		}
	}
}

func TestReadReplyMalformed(t *testing.T) {
	for _, in := range []string{"?x\r\n", "$2\r\nabcd\r\n", "*x\r\n", "$?\r\n"} {
		r := NewReader(strings.NewReader(in), 16, DefaultLimits())
		var p Reply
		if err := r.ReadReply(&p); !IsProtocolError(err) {
			t.Errorf("%q: got %v, want protocol error", in, err)
		}
	}
}

func TestWriterAppend(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, 0)
	w.Buf = AppendArgs(w.Buf, [][]byte{[]byte("SET"), []byte("k"), []byte("v")})
	w.Buf = AppendInt(w.Buf, -3)
	w.Buf = AppendStatus(w.Buf, "OK")
	w.Buf = AppendError(w.Buf, "ERR a\r\nb")
	w.Buf = AppendNull(w.Buf, 2)
	w.Buf = AppendNull(w.Buf, 3)
	w.Buf = AppendBulkString(w.Buf, "x")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n:-3\r\n+OK\r\n-ERR a  b\r\n$-1\r\n_\r\n$1\r\nx\r\n"
	if buf.String() != want {
		t.Fatalf("got %q, want %q", buf.String(), want)
	}
}

func BenchmarkReadPipeline(b *testing.B) {
	one := "*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000001\r\n$3\r\nxxx\r\n"
	in := []byte(strings.Repeat(one, 16))
	rd := bytes.NewReader(in)
	r := NewReader(rd, 4096, DefaultLimits())
	var c Command
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		rd.Reset(in)
		r.Reset(rd)
		for j := 0; j < 16; j++ {
			if err := r.ReadCommand(&c); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestBufferShrinksAfterHugeFrame(t *testing.T) {
	big := strings.Repeat("v", 3<<20)
	in := "*2\r\n$4\r\nECHO\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n"
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(in))
		pw.Write([]byte("*1\r\n$4\r\nPING\r\n"))
		pw.Close()
	}()
	r := NewReader(pr, 4096, DefaultLimits())
	var c Command
	if err := r.ReadCommand(&c); err != nil || len(c.Args[1]) != len(big) {
		t.Fatalf("big command: %v", err)
	}
	if err := r.ReadCommand(&c); err != nil || string(c.Args[0]) != "PING" {
		t.Fatalf("next command: %v", err)
	}
	if len(r.buf) > shrinkAbove {
		t.Fatalf("buffer still %d bytes after the huge frame was consumed", len(r.buf))
	}
}

// chunkReader returns data in chunks of at most n bytes, then EOF.
type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

// A header alone must not make the buffer grow to the length it claims:
// one per connection would exhaust memory.
func TestHugeBulkHeaderDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"*1\r\n$536870912\r\n" + strings.Repeat("x", 100), "$536870912\r\nabc"} {
		r := NewReader(&chunkReader{data: []byte(in), n: 1 << 20}, 16<<10, DefaultLimits())
		var err error
		if in[0] == '*' {
			var c Command
			err = r.ReadCommand(&c)
		} else {
			var p Reply
			err = r.ReadReply(&p)
		}
		if err != io.EOF {
			t.Fatalf("%q: err = %v, want EOF", in[:12], err)
		}
		if len(r.buf) > 2<<20 {
			t.Fatalf("%q: buffer grew to %d bytes on a header alone", in[:12], len(r.buf))
		}
	}
}

// A real large frame still reads whole, with the buffer growing as its
// bytes arrive.
func TestLargeBulkStillReads(t *testing.T) {
	val := bytes.Repeat([]byte("v"), 9<<20)
	in := AppendArgs(nil, [][]byte{[]byte("SET"), []byte("k"), val})
	r := NewReader(&chunkReader{data: in, n: 64 << 10}, 512, DefaultLimits())
	var c Command
	if err := r.ReadCommand(&c); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.Args[2], val) {
		t.Fatal("value mangled")
	}
	if len(r.buf) > 2*len(in)+growStep {
		t.Fatalf("buffer %d bytes for a %d-byte frame", len(r.buf), len(in))
	}
}

// TestReadCommandLikeRedis pins the parser to what redis-server 7.0 does
// with the same bytes (each case was checked against it): the commands it
// runs, and the exact error it answers before closing the connection.
func TestReadCommandLikeRedis(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want [][]string
		err  string // the error reply's text after "-ERR "
	}{
		"quoted inline":             {in: "SET \"a b\" \"c\\\"d\"\r\nGET \"a b\"\r\n", want: [][]string{{"SET", "a b", `c"d`}, {"GET", "a b"}}},
		"unbalanced quotes":         {in: "SET x \"unbalanced\r\nPING\r\n", err: "Protocol error: unbalanced quotes in request"},
		"closing quote then a word": {in: "ECHO \"a\"b\r\n", err: "Protocol error: unbalanced quotes in request"},
		"single quotes":             {in: "ECHO 'it\\'s' x\r\n", want: [][]string{{"ECHO", "it's", "x"}}},
		"escapes":                   {in: "ECHO \"\\x41\\n\\t\\q\"\r\n", want: [][]string{{"ECHO", "A\n\tq"}}},
		"empty argument kept":       {in: "SET k \"\"\r\n", want: [][]string{{"SET", "k", ""}}},
		"vertical tab inside":       {in: "PING\vx\r\n\v PING\r\n", want: [][]string{{"PING\vx"}, {"PING"}}},
		"LF alone ends a line":      {in: "PING\nPING\r\n", want: [][]string{{"PING"}, {"PING"}}},
		"NUL hides the line end":    {in: "ECHO a\x00b\r\nPING\r\n"},
		"NUL hides the count end":   {in: "*1\r\n\x00\r\n"},
		"bytes after a bulk unread": {in: "*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n", want: [][]string{{"PING"}, {"PING"}}},
		"count at INT_MAX waits":    {in: "*2147483647\r\n"},
		"count above INT_MAX":       {in: "*2147483648\r\n", err: "Protocol error: invalid multibulk length"},
		"count with a zero":         {in: "*01\r\n$4\r\nPING\r\n", err: "Protocol error: invalid multibulk length"},
		"bulk length with a zero":   {in: "*1\r\n$05\r\nhello\r\n", err: "Protocol error: invalid bulk length"},
		"not a bulk":                {in: "*1\r\nx\nfoo\r\n", err: "Protocol error: expected '$', got 'x'"},
		"bulk above 512 MiB":        {in: "*1\r\n$536870913\r\n", err: "Protocol error: invalid bulk length"},
		"no count end in 64 KiB":    {in: "*" + strings.Repeat("1", 65537), err: "Protocol error: too big mbulk count string"},
		"no bulk count end":         {in: "*1\r\n$" + strings.Repeat("1", 65537), err: "Protocol error: too big bulk count string"},
		"inline line too long":      {in: strings.Repeat("a", 65537), err: "Protocol error: too big inline request"},
		"zero and negative counts":  {in: "*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", want: [][]string{{"PING"}}},
	} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.in), 16, DefaultLimits())
			var got [][]string
			var c Command
			var err error
			for {
				if err = r.ReadCommand(&c); err != nil {
					break
				}
				var args []string
				for _, a := range c.Args {
					args = append(args, string(a))
				}
				got = append(got, args)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			switch {
			case tc.err == "" && err != io.EOF:
				t.Errorf("err = %v, want none (EOF)", err)
			case tc.err != "" && (!IsProtocolError(err) || err.Error() != tc.err):
				t.Errorf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// Redis can produce replies far deeper than any fixed limit (a script's
// nested tables, about 8,000 levels before Lua's own limit) and with
// millions of elements (LRANGE): the scanner relays them whole, read in
// small pieces.
func TestReadReplyAnyDepthAndSize(t *testing.T) {
	deep := strings.Repeat("*1\r\n", 100000) + ":1\r\n"
	var wide strings.Builder
	wide.WriteString("*1100000\r\n")
	for i := 0; i < 1100000; i++ {
		wide.WriteString("$1\r\nx\r\n")
	}
	mixed := "|1\r\n+a\r\n+b\r\n*1000\r\n" + strings.Repeat("|1\r\n+k\r\n+v\r\n%1\r\n+f\r\n:1\r\n", 1000)
	for name, in := range map[string]string{"deep": deep, "wide": wide.String(), "attributes": mixed} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(&chunkReader{data: []byte(in + "+OK\r\n"), n: 4096}, 512, ReplyLimits())
			var p Reply
			if err := r.ReadReply(&p); err != nil {
				t.Fatal(err)
			}
			if string(p.Raw) != in {
				t.Fatalf("reply of %d bytes, want %d", len(p.Raw), len(in))
			}
			if err := r.ReadReply(&p); err != nil || string(p.Raw) != "+OK\r\n" {
				t.Fatalf("next reply %q, %v", p.Raw, err)
			}
		})
	}
}

// A large reply can be released as it arrives (TakePartial): the pieces
// and the rest, put together, are the reply, whatever the read sizes, and
// the buffer stays small.
func TestTakePartialStreamsALargeReply(t *testing.T) {
	big := strings.Repeat("v", 3<<20)
	replies := []string{
		"$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n",
		"*3\r\n:1\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n+tail\r\n",
		"|1\r\n+ttl\r\n:3\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n",
		"-ERR " + strings.Repeat("e", 1<<20) + "\r\n",
	}
	for i, want := range replies {
		for _, chunk := range []int{1000, 64 << 10, 1 << 20} {
			in := want + "+OK\r\n"
			r := NewReader(&chunkReader{data: []byte(in), n: chunk}, 4096, ReplyLimits())
			var got []byte
			var p Reply
			for {
				ok, err := r.TryReply(&p)
				if err != nil {
					t.Fatalf("reply %d, chunk %d: %v", i, chunk, err)
				}
				if ok {
					break
				}
				if r.Pending() > 256<<10 {
					got = append(got, r.TakePartial()...)
				}
				if err := r.Fill(); err != nil {
					t.Fatalf("reply %d, chunk %d: fill: %v", i, chunk, err)
				}
			}
			got = append(got, p.Raw...)
			if string(got) != want {
				t.Fatalf("reply %d, chunk %d: %d bytes, want %d", i, chunk, len(got), len(want))
			}
			if p.Type != want[strings.IndexAny(want, "$*-")] && want[0] != '|' {
				t.Fatalf("reply %d: type %q", i, p.Type)
			}
			if len(r.buf) > 2<<20 {
				t.Fatalf("reply %d, chunk %d: buffer grew to %d", i, chunk, len(r.buf))
			}
			if err := r.ReadReply(&p); err != nil || string(p.Raw) != "+OK\r\n" || p.Partial {
				t.Fatalf("reply after: %q %v %v", p.Raw, p.Partial, err)
			}
		}
	}
}
