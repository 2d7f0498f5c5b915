package transparency

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// TestBlockingOrderMomentsApart: client A sends BLPOP, then client B sends
// BLPOP on the same list as soon as A's write returned (no waiting for A to
// be blocked), then the list gets two elements: A must get the first, every
// time, as with direct connections. Before, the proxy dialled a connection
// per blocking client on demand, and B's dial was sometimes faster (1 in
// 20-60 tries). The event loop reads both clients in one place, in the
// order their bytes came, and sends the commands in that order; sessions
// only (--event-loop=false) do not keep this order for
// commands microseconds apart (docs/proxy.md).
func TestBlockingOrderMomentsApart(t *testing.T) {
	ds := deployments(t)
	d := ds[0] // standalone: the order is the proxy's, not the cluster's
	const tries = 60
	for _, tg := range []target{d.direct, d.proxies[0]} {
		t.Run(tg.name, func(t *testing.T) {
			inverted := 0
			for i := range tries {
				for _, n := range tg.nodes {
					reset(t, n)
				}
				q := fmt.Sprintf("{t}order:%d", i)
				a, b, c := dial(t, tg.addr), dial(t, tg.addr), dial(t, tg.addr)
				send(t, a.conn, "BLPOP", q, "0")
				send(t, b.conn, "BLPOP", q, "0")
				waitBlocked(t, tg, 2, i)
				send(t, c.conn, "RPUSH", q, "first", "second")
				readFrame(c.conn, c.r)
				got := readFrame(a.conn, a.r)
				if !strings.Contains(got, "first") {
					inverted++
				}
				readFrame(b.conn, b.r)
				a.conn.Close()
				b.conn.Close()
				c.conn.Close()
			}
			if inverted > 0 {
				t.Errorf("%d of %d times the client that blocked second got the first element", inverted, tries)
			}
		})
	}
}

type rawClient struct {
	conn net.Conn
	r    *resp.Reader
}

func dial(t *testing.T, addr string) rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(time.Minute))
	return rawClient{conn: c, r: resp.NewReader(c, 4096, replyLimits)}
}

func send(t *testing.T, c net.Conn, args ...string) {
	t.Helper()
	write(t, c, resp.AppendArgs(nil, bytesOf(args)))
}

// bytesOf is a command's arguments as bytes.
func bytesOf(args []string) [][]byte {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return b
}
