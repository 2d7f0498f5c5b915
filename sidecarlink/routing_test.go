package sidecarlink

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

func TestRoutingRequest(t *testing.T) {
	for name, tc := range map[string]struct {
		uri  string
		want RoutingRequest
		err  error
	}{
		"full":               {uri: "/routing/v1/shop/checkout?after=7&heartbeat=2s", want: RoutingRequest{Namespace: "shop", Name: "checkout", After: 7, Heartbeat: 2 * time.Second}},
		"defaults":           {uri: "/routing/v1/shop/checkout", want: RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: DefaultHeartbeat}},
		"malformed values":   {uri: "/routing/v1/shop/checkout?after=x&heartbeat=soon", want: RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: DefaultHeartbeat}},
		"negative after":     {uri: "/routing/v1/shop/checkout?after=-3", want: RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: DefaultHeartbeat}},
		"heartbeat too fast": {uri: "/routing/v1/shop/checkout?heartbeat=1ms", want: RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: MinHeartbeat}},
		"heartbeat too slow": {uri: "/routing/v1/shop/checkout?heartbeat=1h", want: RoutingRequest{Namespace: "shop", Name: "checkout", Heartbeat: MaxHeartbeat}},
		"no name":            {uri: "/routing/v1/shop", err: ErrRoutingRequest},
		"empty name":         {uri: "/routing/v1/shop/", err: ErrRoutingRequest},
		"empty namespace":    {uri: "/routing/v1//checkout", err: ErrRoutingRequest},
		"too deep":           {uri: "/routing/v1/shop/checkout/x", err: ErrRoutingRequest},
		"other version":      {uri: "/routing/v2/shop/checkout", err: ErrRoutingRequest},
	} {
		t.Run(name, func(t *testing.T) {
			u, err := url.ParseRequestURI(tc.uri)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseRoutingRequest(u)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ParseRoutingRequest(%q) (-want +got):\n%s", tc.uri, d)
			}
		})
	}
}

// FuzzParseRoutingRequest: whatever the request line, ParseRoutingRequest
// does not panic, refuses it or yields a request within the bounds, and
// what it yields reads back the same from its URI.
func FuzzParseRoutingRequest(f *testing.F) {
	f.Add("/routing/v1/shop/checkout?after=7&heartbeat=2s")
	f.Add("/routing/v1/shop/checkout")
	f.Add("/routing/v1/shop")
	f.Add("/routing/v1/a%2Fb/c?after=99999999999999999999&heartbeat=-1s")
	f.Fuzz(func(t *testing.T, uri string) {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			return
		}
		r, err := ParseRoutingRequest(u)
		if err != nil {
			return
		}
		if r.Namespace == "" || r.Name == "" || strings.Contains(r.Name, "/") || r.After < 0 ||
			r.Heartbeat < MinHeartbeat || r.Heartbeat > MaxHeartbeat {
			t.Fatalf("ParseRoutingRequest(%q) = %+v: out of bounds", uri, r)
		}
		u2, err := url.ParseRequestURI(r.URI())
		if err != nil {
			t.Fatalf("URI %q of %+v does not parse: %v", r.URI(), r, err)
		}
		again, err := ParseRoutingRequest(u2)
		if err != nil || again != r {
			t.Fatalf("%+v read back from %q as %+v, %v", r, r.URI(), again, err)
		}
	})
}
