package watch

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/routing"
)

type frame struct {
	version int64
	table   string
}

func readAll(t testing.TB, data []byte) ([]frame, error) {
	t.Helper()
	var got []frame
	err := ReadFrames(bufio.NewReader(bytes.NewReader(data)), func(v int64, table []byte) {
		got = append(got, frame{v, string(table)})
	})
	return got, err
}

func TestFramesRoundTrip(t *testing.T) {
	want := []frame{{7, `{"version":7}`}, {0, ""}, {8, `{"version":8,"entries":[]}`}, {9, "x\ny\n"}}
	var b []byte
	for _, f := range want {
		b = AppendFrame(b, f.version, []byte(f.table))
	}
	if s := string(AppendFrame(nil, 0, nil)); s != "0 0\n" {
		t.Fatalf("heartbeat frame %q, want \"0 0\\n\"", s)
	}
	got, err := readAll(t, b)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v, want io.EOF", err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d frames, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadFramesRefusesMalformed(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want error
	}{
		"no length":             {"7\n{}", ErrFrame},
		"not numbers":           {"seven 2\n{}", ErrFrame},
		"negative version":      {"-1 2\n{}", ErrFrame},
		"negative length":       {"1 -2\n", ErrFrame},
		"table without version": {"0 2\n{}", ErrFrame},
		"over the size limit":   {"1 " + strings.Repeat("9", 12) + "\n", ErrFrame},
		"endless header":        {strings.Repeat("1", 5000), ErrFrame},
		"long header":           {strings.Repeat("1", 60) + " 1\n{", ErrFrame},
		"table cut short":       {"3 10\n{}", io.ErrUnexpectedEOF},
		"header cut short":      {"3 1", io.ErrUnexpectedEOF},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readAll(t, []byte(tc.in))
			if !errors.Is(err, tc.want) {
				t.Fatalf("ReadFrames(%.40q) = %v, want %v", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzReadFrames: whatever the bytes, ReadFrames ends with an error (never
// a panic or a table over the limit), and what it read re-encodes to a
// prefix of its input.
func FuzzReadFrames(f *testing.F) {
	f.Add([]byte("0 0\n"))
	f.Add(AppendFrame(AppendFrame(nil, 3, []byte(`{"version":3}`)), 0, nil))
	f.Add([]byte("1 5\nabc"))
	f.Add([]byte("18446744073709551616 1\nx"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readAll(t, data)
		if err == nil {
			t.Fatal("ReadFrames returned without an error")
		}
		var b []byte
		for _, fr := range got {
			if len(fr.table) > routing.MaxTableBytes {
				t.Fatalf("a table of %d bytes passed", len(fr.table))
			}
			b = AppendFrame(b, fr.version, []byte(fr.table))
		}
		if !bytes.HasPrefix(data, b) && len(got) > 0 {
			// Headers may be written differently ("+1", "01"): compare
			// frame by frame instead.
			again, _ := readAll(t, b)
			if len(again) != len(got) {
				t.Fatalf("re-encoding %d frames read back %d", len(got), len(again))
			}
		}
	})
}
