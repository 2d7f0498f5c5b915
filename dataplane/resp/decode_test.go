package resp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecode(t *testing.T) {
	cases := []struct {
		in   string
		want any
	}{
		{"+OK\r\n", "OK"},
		{"-ERR bad\r\n", Error("ERR bad")},
		{":-42\r\n", int64(-42)},
		{"$3\r\nabc\r\n", []byte("abc")},
		{"$0\r\n\r\n", []byte{}},
		{"$-1\r\n", nil},
		{"*-1\r\n", nil},
		{"_\r\n", nil},
		{"*2\r\n:1\r\n$1\r\nx\r\n", []any{int64(1), []byte("x")}},
		{"%1\r\n+k\r\n:2\r\n", []any{"k", int64(2)}},
		{">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", Push{[]byte("invalidate"), []any{[]byte("k")}}},
		{"|1\r\n+a\r\n+b\r\n:7\r\n", int64(7)},
		{"!3\r\nERR\r\n", Error("ERR")},
		{",1.5\r\n", "1.5"},
	}
	for _, c := range cases {
		v, n, err := Decode([]byte(c.in), Limits{})
		if err != nil {
			t.Errorf("Decode(%q): %v", c.in, err)
			continue
		}
		if n != len(c.in) {
			t.Errorf("Decode(%q) took %d bytes, want %d", c.in, n, len(c.in))
		}
		if d := cmp.Diff(c.want, v); d != "" {
			t.Errorf("Decode(%q) (-want +got):\n%s", c.in, d)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{
		"", "+OK", "*2\r\n:1\r\n", "$5\r\nab\r\n", "*1000000\r\n", "*-2\r\n",
		"$-5\r\n", "?x\r\n", ":x\r\n", "$3\r\nabcXY",
		strings.Repeat("*1\r\n", 100) + ":1\r\n",
	} {
		if _, _, err := Decode([]byte(in), Limits{}); !IsProtocolError(err) {
			t.Errorf("Decode(%q): err = %v, want a protocol error", in, err)
		}
	}
}

// A huge aggregate header must not allocate by its claimed length.
func TestDecodeHeaderDoesNotAllocate(t *testing.T) {
	in := []byte("*1000000\r\n:1\r\n")
	allocs := testing.AllocsPerRun(10, func() { _, _, _ = Decode(in, Limits{}) })
	if allocs > 3 {
		t.Fatalf("%v allocations for a bare header", allocs)
	}
}

func TestReadValue(t *testing.T) {
	r := NewReader(strings.NewReader("*2\r\n$1\r\na\r\n:3\r\n+PONG\r\n"), 16, Limits{})
	v, err := r.ReadValue()
	if err != nil || !cmp.Equal(v, []any{[]byte("a"), int64(3)}) {
		t.Fatalf("ReadValue = %v, %v", v, err)
	}
	v, err = r.ReadValue()
	if err != nil || v != "PONG" {
		t.Fatalf("ReadValue = %v, %v", v, err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$4\r\nabcd\r\n"))
	f.Add([]byte(">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"))
	f.Add([]byte("%1\r\n+a\r\n|1\r\n+b\r\n+c\r\n:1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := Limits{MaxBulk: 1 << 16, MaxArgs: 1 << 10, MaxInline: 1 << 10, MaxDepth: 8}
		_, n, err := Decode(b, lim)
		if err == nil && (n <= 0 || n > len(b)) {
			t.Fatalf("consumed %d of %d", n, len(b))
		}
		// Decode and the Reader's framing agree on where a reply ends.
		r := NewReader(bytes.NewReader(b), 16, lim)
		var p Reply
		rerr := r.ReadReply(&p)
		if err == nil && (rerr != nil || len(p.Raw) != n) {
			t.Fatalf("Decode took %d bytes, ReadReply %d (%v)", n, len(p.Raw), rerr)
		}
	})
}
