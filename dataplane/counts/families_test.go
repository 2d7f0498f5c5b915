package counts

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// TestClientSendsFamilies: the families of a key's commands are ORed over
// the interval and sent with its counts, also for a key whose commands
// were all refused (families, no counts of its own in the call).
func TestClientSendsFamilies(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ObserveFamilies("ns/p", "q", routing.FamOrdered)
	c.Observe("ns/p", "q", 0, 1, 10)
	c.ObserveFamilies("ns/p", "q", routing.FamScript)
	c.ObserveFamilies("ns/p", "only", routing.FamCounter)
	c.Flush()
	buf := make([]byte, sidecarlink.MaxDatagram+1)
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	var d sidecarlink.Decoder
	b, err := d.Decode(buf[:l])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]routing.Families{}
	for _, e := range b.Entries {
		got[string(e.Key)] = e.Families
	}
	if got["q"] != routing.FamOrdered|routing.FamScript || got["only"] != routing.FamCounter {
		t.Errorf("families sent: %v", got)
	}
}

// BenchmarkObserveWithFamilies is BenchmarkObserve with the families call
// the proxy makes for each command: the cost families add per command.
func BenchmarkObserveWithFamilies(b *testing.B) {
	benchObserve(b, func(c *Client, key string) {
		c.ObserveFamilies("shop/checkout", key, routing.FamStringRead)
		c.Observe("shop/checkout", key, 1, 0, 64)
	})
}

// TestClientSendsRefusals: the commands refused because of a key's move
// are counted over the interval and sent with the key's entry, and start
// over in the next interval.
func TestClientSendsRefusals(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func() map[string]uint32 {
		t.Helper()
		buf := make([]byte, sidecarlink.MaxDatagram+1)
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		l, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		var d sidecarlink.Decoder
		b, err := d.Decode(buf[:l])
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint32{}
		for _, e := range b.Entries {
			got[string(e.Key)] = e.Refused
		}
		return got
	}
	for range 3 {
		c.Observe("ns/p", "q", 0, 1, 10)
		c.ObserveRefused("ns/p", "q")
	}
	c.Observe("ns/p", "ok", 0, 1, 10)
	c.Flush()
	if got := read(); got["q"] != 3 || got["ok"] != 0 {
		t.Errorf("refusals sent: %v, want q: 3, ok: 0", got)
	}
	c.Observe("ns/p", "q", 0, 1, 10)
	c.Flush()
	if got := read(); got["q"] != 0 {
		t.Errorf("refusals sent in the next interval: %v, want none", got)
	}
}

// TestClientSendsMoveOutcomes: the commands a key's move served and those
// of them that failed go out with the key, and with them the policy's
// baseline of the interval (its commands sent raw, and those failed); a
// key no move served carries none; the next interval starts over.
func TestClientSendsMoveOutcomes(t *testing.T) {
	pc := listen(t)
	c, err := NewClient(pc.LocalAddr().String(), ClientOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func() map[string]sidecarlink.MoveCounts {
		t.Helper()
		buf := make([]byte, sidecarlink.MaxDatagram+1)
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		l, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		var d sidecarlink.Decoder
		b, err := d.Decode(buf[:l])
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]sidecarlink.MoveCounts{}
		for _, e := range b.Entries {
			got[string(e.Key)] = e.Moved
		}
		return got
	}
	for i := range 10 {
		c.Observe("ns/p", "split", 0, 1, 10)
		c.ObserveMoved("ns/p", "split", i%2 == 0, i < 4)
	}
	for i := range 100 {
		c.ObserveRaw("ns/p", i < 30, i == 0)
	}
	c.Observe("ns/p", "plain", 1, 0, 10)
	c.Flush()
	got := read()
	if want := (sidecarlink.MoveCounts{Served: 10, Failed: 4, BaseTotal: 100, BaseFailed: 1, ReadServed: 5, ReadFailed: 2, BaseReads: 30, BaseReadsFailed: 1}); got["split"] != want || got["plain"] != (sidecarlink.MoveCounts{}) {
		t.Errorf("sent %+v, want split: %+v, plain: none", got, want)
	}
	c.ObserveMoved("ns/p", "split", false, false)
	c.Flush()
	if got := read(); got["split"] != (sidecarlink.MoveCounts{Served: 1}) {
		t.Errorf("next interval: %+v, want split served 1, nothing failed, no raw command", got)
	}
}
