//go:build linux

package capture

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/netns"
)

// muxScript reads, on ioredis' one connection, rounds of 200 small keys
// and 4 large ones at once: commands are written while earlier replies
// are still arriving, the case where replies are hardest to match.
const muxScript = `
const Redis = require('ioredis');
const r = new Redis({host: process.argv[1], port: 6379, lazyConnect: true, enableOfflineQueue: true});
(async () => {
  await r.connect();
  for (let round = 0; round < 20; round++) {
    const ps = [];
    for (let i = 0; i < 200; i++) {
      ps.push(r.get('mx:small:' + i));
      if (i % 50 === 25) ps.push(r.get('mx:big:' + (i / 50 | 0)));
    }
    await Promise.all(ps);
    for (let i = 0; i < 5; i++) await r.get('mx:small:' + i);
  }
  r.disconnect();
})().catch(e => { console.error(e); process.exit(1); });
`

// TestReplySizesMultiplexedInNamespaces: a multiplexing client (ioredis,
// one connection, commands written as they are issued) reading large and
// small values at once from a real redis-server: whatever is sized is
// sized right (no small key gets a large value's size, no large key
// another's). Its first loss of step comes with commands in flight, after
// which the connection is not sized again: resuming there gave 1 small
// key in 204 a large key's size in 4 runs of 10.
func TestReplySizesMultiplexedInNamespaces(t *testing.T) {
	node, err := exec.LookPath("node")
	modules, _ := filepath.Abs("../../bin/node_modules")
	if _, serr := os.Stat(filepath.Join(modules, "ioredis", "package.json")); err != nil || serr != nil {
		t.Skip("needs node and bin/node_modules/ioredis (hack/setup-clients.sh)")
	}
	n := netns.ForTest(t, "redis-server")
	netns.Redis(t, n.Server, netns.ServerIP, 6379)
	server := netip.MustParseAddrPort(netns.ServerIP + ":6379")
	ctx, cancel := context.WithCancel(context.Background())
	admin := serverAdmin(t, ctx, n, server)
	want := map[string]uint32{}
	for i := range 200 {
		v := fmt.Sprintf("v%d", i)
		want[fmt.Sprintf("mx:small:%d", i)] = uint32(bulkLen(len(v)))
		if err := admin.Set(ctx, fmt.Sprintf("mx:small:%d", i), v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		size := 50000 * (i + 1)
		want[fmt.Sprintf("mx:big:%d", i)] = uint32(bulkLen(size))
		if err := admin.Set(ctx, fmt.Sprintf("mx:big:%d", i), strings.Repeat("b", size), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c, tl := replyCapture(t, ctx, cancel, n, server, netns.ClientIP, netns.ClientIP2, netns.ClientIP3)

	runCtx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	cmd := netns.Command(runCtx, n.Client, node, "-e", muxScript, netns.ServerIP)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ioredis: %v: %s", err, out)
	}
	const reads = 20 * (200 + 4 + 5)
	eventually.True(t, 20*time.Second, "every read counted", func() bool {
		total := uint32(0)
		for k := range want {
			total += tl.get(k).Reads
		}
		return total == reads
	})
	flushes := c.Stats().Flushes
	eventually.True(t, 20*time.Second, "two more flushes", func() bool { return c.Stats().Flushes >= flushes+2 })
	sized, bigSized := 0, 0
	for k, w := range want {
		g := tl.get(k)
		if g.Size != 0 && g.Size != w {
			t.Errorf("%s: size %d, its value's reply is %d", k, g.Size, w)
		}
		if g.Size != 0 {
			sized++
			if strings.HasPrefix(k, "mx:big:") {
				bigSized++
			}
		}
	}
	if sized == 0 {
		t.Error("nothing sized before the first loss of step")
	}
	st := c.Stats()
	t.Logf("%d of %d keys sized (%d of 4 large); replies matched %d, estimated %d, lost %d, unmatched %d; reply packets %d",
		sized, len(want), bigSized, st.Replies, st.ReplyEstimated, st.ReplyLost, st.ReplyUnmatched, st.ReplyPackets)
}
