package resp

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// pieceReader returns at most n bytes per Read, as a socket does.
type pieceReader struct {
	b []byte
	n int
}

func (c *pieceReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

func streamLimits(above int) Limits {
	l := DefaultLimits()
	l.StreamAbove = above
	return l
}

// readStreamed reads every command of in, streamed or whole, and returns
// each one's bytes as passed on (head and chunks), its head arguments, and
// the largest buffer the Reader held.
func readStreamed(t *testing.T, rd io.Reader, above int) (frames []string, heads [][]string, streamed []bool, maxBuf int, err error) {
	t.Helper()
	r := NewReader(rd, 16<<10, streamLimits(above))
	var c Command
	for {
		if err := r.ReadCommand(&c); err != nil {
			if err == io.EOF {
				return frames, heads, streamed, maxBuf, nil
			}
			return frames, heads, streamed, maxBuf, err
		}
		var out bytes.Buffer
		out.Write(c.Raw)
		var args []string
		for _, a := range c.Args {
			args = append(args, string(a))
		}
		if c.Streamed {
			if c.Argc <= len(c.Args) {
				t.Fatalf("streamed head with Argc %d, %d args", c.Argc, len(c.Args))
			}
			for {
				b, done, err := r.Chunk()
				maxBuf = max(maxBuf, len(r.buf))
				if err != nil {
					return frames, heads, streamed, maxBuf, err
				}
				out.Write(b)
				if done {
					break
				}
			}
		}
		maxBuf = max(maxBuf, len(r.buf))
		frames = append(frames, out.String())
		heads = append(heads, args)
		streamed = append(streamed, c.Streamed)
	}
}

func bulkFrame(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

// A command with a large value is returned as its head (name and key) and
// passed on in bounded pieces, byte for byte, whatever its size and
// however the bytes arrive; the commands around it are parsed as usual.
func TestStreamedCommand(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 1<<17) // 2 MiB
	tests := map[string]struct {
		frames []string
		heads  [][]string
		stream []bool
	}{
		"SET": {
			frames: []string{bulkFrame("PING"), bulkFrame("SET", "k", big), bulkFrame("GET", "k")},
			heads:  [][]string{{"PING"}, {"SET", "k"}, {"GET", "k"}},
			stream: []bool{false, true, false},
		},
		"options after the value": {
			frames: []string{bulkFrame("SET", "k", big, "EX", "100"), bulkFrame("PING")},
			heads:  [][]string{{"SET", "k"}, {"PING"}},
			stream: []bool{true, false},
		},
		"two large values": {
			frames: []string{bulkFrame("HSET", "h", "f1", big, "f2", big)},
			heads:  [][]string{{"HSET", "h", "f1"}},
			stream: []bool{true},
		},
		"small under the threshold": {
			frames: []string{bulkFrame("SET", "k", big[:1<<20]), bulkFrame("PING")},
			heads:  [][]string{{"SET", "k", big[:1<<20]}, {"PING"}},
			stream: []bool{false, false},
		},
	}
	for name, tc := range tests {
		for _, step := range []int{1 << 20, 4096, 7} {
			if step == 7 && name != "options after the value" {
				continue // byte-level splits once; the rest is slow
			}
			t.Run(name+"/"+strconv.Itoa(step), func(t *testing.T) {
				in := strings.Join(tc.frames, "")
				frames, heads, streamed, maxBuf, err := readStreamed(t, &pieceReader{b: []byte(in), n: step}, 1<<20+16)
				if err != nil {
					t.Fatal(err)
				}
				if len(frames) != len(tc.frames) {
					t.Fatalf("%d commands, want %d", len(frames), len(tc.frames))
				}
				for i := range frames {
					if frames[i] != tc.frames[i] {
						t.Errorf("command %d: %d bytes passed on, want its %d exactly", i, len(frames[i]), len(tc.frames[i]))
					}
					if streamed[i] != tc.stream[i] {
						t.Errorf("command %d: streamed %v, want %v", i, streamed[i], tc.stream[i])
					}
					if strings.Join(heads[i], " ") != strings.Join(tc.heads[i], " ") {
						t.Errorf("command %d: head %.60q, want %.60q", i, heads[i], tc.heads[i])
					}
				}
				// Whole commands of 1 MiB grow the buffer to hold them;
				// streamed ones do not.
				if maxBuf > 3<<20 {
					t.Errorf("buffer grew to %d bytes", maxBuf)
				}
			})
		}
	}
}

// A command of many small arguments whose bytes pass the threshold is
// streamed too, from an argument boundary.
func TestStreamedManyArguments(t *testing.T) {
	args := []string{"RPUSH", "list"}
	for i := 0; i < 2000; i++ {
		args = append(args, strings.Repeat("e", 1000)+strconv.Itoa(i))
	}
	in := bulkFrame(args...) + bulkFrame("LLEN", "list")
	frames, heads, streamed, maxBuf, err := readStreamed(t, &pieceReader{b: []byte(in), n: 8192}, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || frames[0]+frames[1] != in {
		t.Fatalf("%d commands; bytes passed on differ", len(frames))
	}
	if !streamed[0] || streamed[1] || heads[0][0] != "RPUSH" || heads[0][1] != "list" {
		t.Fatalf("streamed %v, head %.3q", streamed, heads[0])
	}
	if maxBuf > 1<<20 {
		t.Errorf("buffer grew to %d bytes", maxBuf)
	}
}

// The headers of the arguments after the large value are checked with
// Redis' own errors.
func TestStreamedProtocolErrors(t *testing.T) {
	big := strings.Repeat("v", 3<<20)
	for name, tc := range map[string]struct{ rest, want string }{
		"not a bulk":   {rest: "+EX\r\n", want: "Protocol error: expected '$', got '+'"},
		"bad length":   {rest: "$x\r\nEX\r\n", want: "Protocol error: invalid bulk length"},
		"over the max": {rest: "$999999999999\r\n", want: "Protocol error: invalid bulk length"},
	} {
		t.Run(name, func(t *testing.T) {
			in := "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n" + tc.rest
			_, _, _, _, err := readStreamed(t, iotest.HalfReader(strings.NewReader(in)), 1<<20)
			if err == nil || err.Error() != tc.want || !IsProtocolError(err) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// HoldWhole gives the head back: the command is then read whole. A client
// that hangs up mid-value ends Chunk with the read's error.
func TestStreamedHoldWholeAndEOF(t *testing.T) {
	big := strings.Repeat("v", 2<<20)
	in := bulkFrame("SET", "k", big, "EX", "9") + bulkFrame("PING")
	r := NewReader(&pieceReader{b: []byte(in), n: 64 << 10}, 16<<10, streamLimits(1<<20))
	var c Command
	if err := r.ReadCommand(&c); err != nil || !c.Streamed || c.Big != len(big) || c.Argc != 5 {
		t.Fatalf("head: err %v, streamed %v, big %d, argc %d", err, c.Streamed, c.Big, c.Argc)
	}
	if _, err := r.TryCommand(&c); err != errStreamPending {
		t.Fatalf("TryCommand during a stream: %v", err)
	}
	if !r.HoldWhole() {
		t.Fatal("HoldWhole refused before any chunk")
	}
	if err := r.ReadCommand(&c); err != nil || c.Streamed || len(c.Args) != 5 || string(c.Args[2]) != big || string(c.Raw) != bulkFrame("SET", "k", big, "EX", "9") {
		t.Fatalf("whole: err %v, streamed %v, %d args", err, c.Streamed, len(c.Args))
	}
	if err := r.ReadCommand(&c); err != nil || c.Streamed || string(c.Args[0]) != "PING" {
		t.Fatalf("next: err %v, %q", err, c.Args)
	}

	cut := bulkFrame("SET", "k", big)[:1<<20]
	r = NewReader(&pieceReader{b: []byte(cut), n: 64 << 10}, 16<<10, streamLimits(1<<20))
	if err := r.ReadCommand(&c); err != nil || !c.Streamed {
		t.Fatalf("head: %v", err)
	}
	if err := r.SkipRest(); err != io.EOF {
		t.Fatalf("SkipRest of a cut command: %v, want EOF", err)
	}
	if r.HoldWhole() {
		t.Fatal("HoldWhole after chunks were read")
	}
}
