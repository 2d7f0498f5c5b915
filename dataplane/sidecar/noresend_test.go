package sidecar

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// lostAfterWrite is a connection that loses itself after a command naming
// marker was written to it: it first reads Redis' reply (so the command
// was applied), then reports the connection lost (io.EOF), as when a node
// dies or a failover's fence closes a connection between the write and
// the reply.
type lostAfterWrite struct {
	net.Conn
	marker []byte
	mu     sync.Mutex
	doomed bool
}

func (c *lostAfterWrite) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.marker) {
		c.mu.Lock()
		c.doomed = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *lostAfterWrite) Read(b []byte) (int, error) {
	c.mu.Lock()
	doomed := c.doomed
	c.mu.Unlock()
	if !doomed {
		return c.Conn.Read(b)
	}
	if _, err := c.Conn.Read(make([]byte, 512)); err != nil { // the reply
		return 0, err
	}
	c.Conn.Close()
	return 0, io.EOF
}

// TestEngineClusterClientNeverSendsACommandTwice: a cluster client made as
// engineClient makes it (sendOnce, noResend on its node clients), against
// a real 3-master cluster, whose connection is lost after an INCRBY
// reached Redis and before its reply, sent alone and in a pipeline: the
// command fails, and Redis applied it once. The same client with go-redis'
// defaults, as applications run it, sends the command again (up to
// MaxRedirects times: MaxRetries -1 alone would not stop it), so a split
// counter would count one client's INCR up to 4 times.
func TestEngineClusterClientNeverSendsACommandTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	cl := redistest.Cluster(t)
	ctx := context.Background()
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer admin.Close()
	for _, tc := range []struct {
		withHook, pipelined bool
	}{{true, false}, {true, true}, {false, false}, {false, true}} {
		withHook := tc.withHook
		key := "noresend:" + map[bool]string{true: "hook", false: "plain"}[withHook] + map[bool]string{true: ":pipelined"}[tc.pipelined]
		if err := admin.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		var d net.Dialer
		uo := &redis.UniversalOptions{Addrs: cl.Addrs(), IsClusterMode: true,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &lostAfterWrite{Conn: c, marker: []byte(key)}, nil
			},
		}
		if withHook { // as engineClient makes it
			sendOnce(uo)
		} // else go-redis' defaults, as an application runs it
		cc := redis.NewClusterClient(uo.Cluster())
		if withHook {
			noResendOnNodes(cc)
		}
		var err error
		if tc.pipelined { // the engine's member writes go in pipelines
			_, err = cc.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.IncrBy(ctx, key, 1)
				return nil
			})
		} else {
			err = cc.IncrBy(ctx, key, 1).Err()
		}
		cc.Close()
		got, gerr := admin.Get(ctx, key).Int64()
		if gerr != nil {
			t.Fatalf("hook %v: GET after the INCRBY: %v (the INCRBY replied %v)", withHook, gerr, err)
		}
		switch {
		case withHook && (err == nil || got != 1):
			t.Errorf("with noResend (pipelined %v): INCRBY replied %v and Redis holds %d; want an error and 1", tc.pipelined, err, got)
		case withHook && mayHaveBeenSent(err):
			t.Errorf("with noResend the error is not marked sent: %v", err)
		case !withHook && got < 2:
			// go-redis no longer resends on its own: noResend is moot, and
			// this test should say so.
			t.Errorf("without noResend (pipelined %v) Redis holds %d: go-redis' ClusterClient no longer sends a command again after a lost connection", tc.pipelined, got)
		}
		t.Logf("noResend %v, pipelined %v: INCRBY replied %v; Redis applied it %d times", withHook, tc.pipelined, err, got)
	}
}
