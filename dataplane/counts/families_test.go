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
