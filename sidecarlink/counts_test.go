package sidecarlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/routing"
)

func entries(kv ...string) []Entry {
	var out []Entry
	for i, k := range kv {
		out = append(out, Entry{Key: []byte(k), Reads: uint32(i + 1), Writes: uint32(2 * i), Bytes: uint32(100 * i), Size: uint32(60 * i),
			Families: routing.Families(1) << (i % 15), Refused: uint32(3 * i)})
		if i%2 == 1 {
			out[i].Moved = MoveCounts{Served: uint32(40 * i), Failed: uint32(i), BaseTotal: uint32(500 * i), BaseFailed: uint32(2 * i)}
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	want := entries("product:1", "likes:post:42", strings.Repeat("k", MaxKeyLen))
	buf := AppendBatch(nil, "shop/checkout", want)
	var d Decoder
	b, err := d.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Policy) != "shop/checkout" {
		t.Errorf("policy = %q", b.Policy)
	}
	if diff := cmp.Diff(want, b.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestDecodeVersion1 reads a batch of a sidecar not yet upgraded: its
// entries carry no size.
func TestDecodeVersion1(t *testing.T) {
	v1 := []byte{'H', 'S', 1, 0, 4, 'n', 's', '/', 'p', 0x81, 0x00, 1, 'k', 5, 0, 200, 1}
	var d Decoder
	b, err := d.Decode(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Key: []byte("k"), Reads: 5, Bytes: 200, Families: routing.FamUnknown}}
	if diff := cmp.Diff(want, b.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestDecodeVersion2 reads a batch of a sidecar that reports sizes but not
// families: its keys' families are unknown, which the manager treats
// conservatively.
func TestDecodeVersion2(t *testing.T) {
	v2 := []byte{'H', 'S', 2, 0, 4, 'n', 's', '/', 'p', 0x81, 0x00, 1, 'k', 5, 1, 200, 1, 40}
	var d Decoder
	b, err := d.Decode(v2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Key: []byte("k"), Reads: 5, Writes: 1, Bytes: 200, Size: 40, Families: routing.FamUnknown}}
	if diff := cmp.Diff(want, b.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestDecodeVersion3 reads a batch of a sidecar that reports families but
// not refusals: none are counted.
func TestDecodeVersion3(t *testing.T) {
	v3 := []byte{'H', 'S', 3, 0, 4, 'n', 's', '/', 'p', 0x81, 0x00, 1, 'k', 5, 1, 200, 1, 40, 8}
	var d Decoder
	b, err := d.Decode(v3)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Key: []byte("k"), Reads: 5, Writes: 1, Bytes: 200, Size: 40, Families: routing.Families(8)}}
	if diff := cmp.Diff(want, b.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestDecodeVersion4 reads a batch of a sidecar of the previous release:
// refusals, no move outcomes.
func TestDecodeVersion4(t *testing.T) {
	v4 := []byte{'H', 'S', 4, 0, 4, 'n', 's', '/', 'p', 0x82, 0x00, 1, 'k', 5, 1, 200, 1, 40, 8, 3, 1, 'j', 1, 0, 0, 0, 8, 0}
	var d Decoder
	b, err := d.Decode(v4)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Key: []byte("k"), Reads: 5, Writes: 1, Bytes: 200, Size: 40, Families: routing.Families(8), Refused: 3},
		{Key: []byte("j"), Reads: 1, Families: routing.Families(8)}}
	if diff := cmp.Diff(want, b.Entries); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestMoveCountsOnlyWhereServed: version 5 spends one byte on an entry
// whose key no move served (served 0), and carries failures and the
// baseline of one that was.
func TestMoveCountsOnlyWhereServed(t *testing.T) {
	plain := AppendBatch(nil, "ns/p", []Entry{{Key: []byte("k"), Reads: 1}})
	if want := []byte{1, 'k', 1, 0, 0, 0, 0, 0, 0}; !bytes.HasSuffix(plain, want) {
		t.Fatalf("entry of a key no move served: %v, want to end %v", plain, want)
	}
	m := MoveCounts{Served: 300, Failed: 75, BaseTotal: 2000, BaseFailed: 4}
	var d Decoder
	b, err := d.Decode(AppendBatch(nil, "ns/p", []Entry{{Key: []byte("k"), Writes: 300, Moved: m}}))
	if err != nil || b.Entries[0].Moved != m {
		t.Fatalf("decoded %+v, %v; want moved %+v", b, err, m)
	}
}

func TestEncoderSplitsAtLimit(t *testing.T) {
	var e Encoder
	e.Reset(nil, "ns/p", 200)
	var got []int
	for i := 0; i < 50; i++ {
		k := strings.Repeat("x", 20)
		if !e.Fits(k) {
			b := e.Bytes()
			if len(b) > 200 {
				t.Fatalf("batch of %d bytes exceeds the 200-byte limit", len(b))
			}
			got = append(got, e.Len())
			e.Reset(nil, "ns/p", 200)
		}
		e.Add(k, 1, 0, 0, 0, routing.FamAll, 0, MoveCounts{})
	}
	if len(got) == 0 {
		t.Fatal("encoder never filled up")
	}
}

func TestDecodeRejects(t *testing.T) {
	good := AppendBatch(nil, "ns/p", entries("a", "b"))
	bigCount := append([]byte{'H', 'S', 1, 0, 4, 'n', 's', '/', 'p'}, binary.AppendUvarint(nil, 5000)...)
	tests := map[string]struct {
		in   []byte
		want error
	}{
		"empty":               {nil, ErrTruncated},
		"short header":        {[]byte{'H', 'S', 1}, ErrTruncated},
		"bad magic":           {append([]byte{'X'}, good[1:]...), ErrMagic},
		"version 7":           {append([]byte{'H', 'S', 7}, good[3:]...), ErrVersion},
		"version 0":           {append([]byte{'H', 'S', 0}, good[3:]...), ErrVersion},
		"v2 with families":    {append([]byte{'H', 'S', 2}, good[3:]...), ErrMalformed},
		"v1 with sizes":       {append([]byte{'H', 'S', 1}, good[3:]...), ErrMalformed},
		"flags":               {append([]byte{'H', 'S', 2, 1}, good[4:]...), ErrFlags},
		"truncated":           {good[:len(good)-1], ErrTruncated},
		"trailing":            {append(bytes.Clone(good), 0), ErrMalformed},
		"oversized":           {make([]byte, MaxDatagram+1), ErrOversized},
		"zero entries":        {AppendBatch(nil, "ns/p", nil), ErrMalformed},
		"empty policy":        {AppendBatch(nil, "", entries("a")), ErrMalformed},
		"empty key":           {AppendBatch(nil, "ns/p", []Entry{{Key: nil, Reads: 1}}), ErrMalformed},
		"key too long":        {AppendBatch(nil, "ns/p", []Entry{{Key: make([]byte, MaxKeyLen+1)}}), ErrMalformed},
		"count > payload":     {bigCount, ErrTruncated},
		"failed > served":     {[]byte{'H', 'S', 5, 0, 4, 'n', 's', '/', 'p', 0x81, 0x00, 1, 'k', 5, 1, 200, 1, 40, 8, 0, 2, 3, 9, 0}, ErrMalformed},
		"base failed > total": {[]byte{'H', 'S', 5, 0, 4, 'n', 's', '/', 'p', 0x81, 0x00, 1, 'k', 5, 1, 200, 1, 40, 8, 0, 2, 1, 9, 10}, ErrMalformed},
		"varint overflows":    {append([]byte{'H', 'S', 1, 0}, bytes.Repeat([]byte{0xff}, 11)...), ErrMalformed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var d Decoder
			_, err := d.Decode(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if Reason(err) != tc.want.Error() {
				t.Errorf("Reason = %q", Reason(err))
			}
		})
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	buf := AppendBatch(nil, "ns/p", entries("a", "b", "c"))
	var d Decoder
	if _, err := d.Decode(buf); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = d.Decode(buf) }); n != 0 {
		t.Errorf("Decode allocates %v times", n)
	}
}

// FuzzDecodeBatch checks that no input panics the decoder, and that whatever it
// accepts re-encodes to the same bytes modulo the count's varint form.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(AppendBatch(nil, "ns/p", entries("a", "b")))
	f.Add(AppendBatch(nil, "shop/checkout", entries("product:iphone_17")))
	f.Add([]byte{'H', 'S', 1, 0})
	f.Add([]byte{'H', 'S', 1, 0, 4, 'n', 's', '/', 'p', 1, 1, 'k', 5, 0, 200, 1})
	f.Add([]byte{'H', 'S', 1, 0, 4, 'n', 's', '/', 'p', 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		var d Decoder
		b, err := d.Decode(in)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		var again Decoder
		out := AppendBatch(nil, string(b.Policy), append([]Entry(nil), b.Entries...))
		b2, err := again.Decode(out)
		if err != nil {
			t.Fatalf("re-encoded batch rejected: %v", err)
		}
		if !cmp.Equal(b.Entries, b2.Entries) || !bytes.Equal(b.Policy, b2.Policy) {
			t.Fatalf("round trip changed the batch")
		}
	})
}

// TestEncoderWritesTheAgentsVersion: to an agent that announces no counts
// version (the previous release's) or 3, a sidecar writes version 3,
// whose entries have no refusal field, which a version 3 reader would
// otherwise take for the next entry's key length and reject the batch;
// to one that announces this version or a later one, this version.
func TestEncoderWritesTheAgentsVersion(t *testing.T) {
	h := func(v string) http.Header {
		h := http.Header{}
		if v != "" {
			h.Set(CountsVersionHeader, v)
		}
		return h
	}
	for _, tc := range []struct {
		header string
		want   int
	}{{"", 3}, {"3", 3}, {"4", 4}, {"5", 5}, {"6", CountsVersion}, {"99", CountsVersion}, {"x", 3}, {"1", 3}} {
		if got := AgentCountsVersion(h(tc.header)); got != tc.want {
			t.Errorf("AgentCountsVersion(%q) = %d, want %d", tc.header, got, tc.want)
		}
	}
	var e Encoder
	e.SetVersion(3)
	e.Reset(nil, "ns/p", MaxDatagram)
	e.Add("k1", 1, 2, 3, 4, routing.FamStringRead, 7, MoveCounts{Served: 1})
	e.Add("k2", 5, 6, 7, 8, routing.FamStringRead, 9, MoveCounts{})
	b := e.Bytes()
	if b[2] != 3 {
		t.Fatalf("version byte %d, want 3", b[2])
	}
	// What version 3 is: each entry six varints after the key, none more.
	want := []byte{'H', 'S', 3, 0, 4, 'n', 's', '/', 'p', 0x82, 0x00,
		2, 'k', '1', 1, 2, 3, 4, byte(routing.FamStringRead),
		2, 'k', '2', 5, 6, 7, 8, byte(routing.FamStringRead)}
	if !bytes.Equal(b, want) {
		t.Fatalf("version 3 batch\n got %v\nwant %v", b, want)
	}
	var d Decoder
	got, err := d.Decode(b)
	if err != nil || len(got.Entries) != 2 || got.Entries[1].Reads != 5 || got.Entries[0].Refused != 0 {
		t.Fatalf("Decode: %+v, %v", got, err)
	}
	e.SetVersion(CountsVersion)
	e.Restart()
	e.Add("k1", 1, 2, 3, 4, routing.FamStringRead, 7, MoveCounts{Served: 9, Failed: 2})
	if got, err := d.Decode(e.Bytes()); err != nil || got.Entries[0].Refused != 7 || got.Entries[0].Moved.Failed != 2 {
		t.Fatalf("version %d: %+v, %v", CountsVersion, got, err)
	}
	// The reads among the move's outcomes and the baseline (version 6),
	// which a version 5 batch leaves out.
	m := MoveCounts{Served: 9, Failed: 3, BaseTotal: 40, BaseFailed: 2, ReadServed: 4, ReadFailed: 3, BaseReads: 30, BaseReadsFailed: 1}
	e.Restart()
	e.Add("k1", 1, 2, 3, 4, routing.FamStringRead, 7, m)
	if got, err := d.Decode(e.Bytes()); err != nil || got.Entries[0].Moved != m {
		t.Fatalf("version %d: %+v, %v; want %+v", CountsVersion, got.Entries[0].Moved, err, m)
	}
	e.SetVersion(5)
	e.Restart()
	e.Add("k1", 1, 2, 3, 4, routing.FamStringRead, 7, m)
	want5 := MoveCounts{Served: 9, Failed: 3, BaseTotal: 40, BaseFailed: 2}
	if got, err := d.Decode(e.Bytes()); err != nil || got.Entries[0].Moved != want5 {
		t.Fatalf("version 5: %+v, %v; want %+v", got.Entries[0].Moved, err, want5)
	}
}

// TestTryAddFillsToTheLimit: TryAdd takes entries by their exact size up
// to the datagram limit, never past it, and leaves the batch whole when
// one does not fit.
func TestTryAddFillsToTheLimit(t *testing.T) {
	var e Encoder
	e.Reset(nil, "ns/p", 200)
	n := 0
	for e.TryAdd("key:"+strings.Repeat("x", 10), 1, 0, 0, 0, routing.FamAll, 0, MoveCounts{Served: uint32(n % 2)}) {
		n++
	}
	b := e.Bytes()
	if len(b) > 200 || 200-len(b) >= EntrySize("key:xxxxxxxxxx") || e.Len() != n {
		t.Fatalf("%d entries in %d bytes (limit 200)", e.Len(), len(b))
	}
	var d Decoder
	if got, err := d.Decode(b); err != nil || len(got.Entries) != n {
		t.Fatalf("Decode: %d entries, %v; want %d", len(got.Entries), err, n)
	}
}
