package engine

import (
	"bytes"
	"errors"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// The tracking connection reads with resp's decoder (fuzzed there as
// FuzzDecode): an invalidation is a resp.Push, an error reply an error.
func TestTrackingReadReply(t *testing.T) {
	in := ">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n-ERR nope\r\n$2\r\nok\r\n"
	r := resp.NewReader(bytes.NewReader([]byte(in)), 0, resp.DefaultLimits())
	v, err := readReply(r)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := v.(resp.Push)
	if !ok || len(p) != 2 || string(asBytes(p[0])) != "invalidate" || len(p[1].([]any)) != 2 {
		t.Fatalf("push = %#v", v)
	}
	var re resp.Error
	if v, err := readReply(r); v != nil || !errors.As(err, &re) || string(re) != "ERR nope" {
		t.Fatalf("error reply = %#v, %v", v, err)
	}
	if v, err := readReply(r); err != nil || string(asBytes(v)) != "ok" {
		t.Fatalf("bulk = %#v, %v", v, err)
	}
	if _, err := readReply(r); err == nil {
		t.Fatal("read past the end: want an error")
	}
	if got := string(encodeCommand("GET", "k")); got != "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n" {
		t.Fatalf("command = %q", got)
	}
}
