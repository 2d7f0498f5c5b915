package proxy_test

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/routing"
)

// fuzzTarget is one Redis and one proxy shared by every fuzz input.
var fuzzTarget struct {
	once   sync.Once
	err    error
	srv    *redisproc.Server
	addr   string
	cancel context.CancelFunc
	done   chan error
	eng    *engine.Engine
	ec     *redis.Client
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fuzzTarget.cancel != nil {
		fuzzTarget.cancel()
		<-fuzzTarget.done
	}
	if fuzzTarget.eng != nil {
		fuzzTarget.eng.Close()
		fuzzTarget.ec.Close()
	}
	if fuzzTarget.srv != nil {
		fuzzTarget.srv.Stop()
	}
	os.Exit(code)
}

func fuzzProxy(t *testing.T) string {
	fuzzTarget.once.Do(func() {
		srv, err := redisproc.Start(context.Background(), redisproc.Options{})
		if err != nil {
			fuzzTarget.err = err
			return
		}
		fuzzTarget.srv = srv
		// Keys a, b and k are mitigated (split, replicate, cache), so that
		// inputs reach the engine and refusal paths too.
		fuzzTarget.ec = redis.NewClient(&redis.Options{Addr: srv.Addr})
		fuzzTarget.eng = engine.New(fuzzTarget.ec, engine.Options{})
		fuzzTarget.eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
			{Key: "a", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 3}}}},
			{Key: "b", Source: routing.SourceDetected, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60000}},
			{Key: "k", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 1000}},
		}})
		p, err := proxy.New(proxy.Config{Upstreams: []string{srv.Addr}, Timeout: 2 * time.Second, Engine: fuzzTarget.eng})
		if err != nil {
			fuzzTarget.err = err
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fuzzTarget.err = err
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		fuzzTarget.addr, fuzzTarget.cancel, fuzzTarget.done = ln.Addr().String(), cancel, make(chan error, 1)
		go func() { fuzzTarget.done <- p.Serve(ctx, ln) }()
	})
	if fuzzTarget.err != nil {
		t.Fatal(fuzzTarget.err)
	}
	return fuzzTarget.addr
}

// FuzzProxyStream sends arbitrary bytes on one connection and checks that
// the proxy answers or closes it (never hangs) and keeps serving another
// client.
func FuzzProxyStream(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "*1\r\n$0\r\n\r\n", "GET\r\n", "*3\r\n$4\r\nEVAL\r\n$1\r\nx\r\n$1\r\n9\r\n",
		"*2\r\n$5\r\nXREAD\r\n$7\r\nSTREAMS\r\n", "*1\r\n$x\r\n", "MULTI\r\nEXEC\r\n", "HELLO 3\r\nGET k\r\n",
		"*2\r\n$6\r\nBLMPOP\r\n$1\r\n0\r\n", "SELECT 1\r\nSET a b\r\nQUIT\r\n", "*-1\r\n*0\r\n",
		"MGET a b k c\r\nMSET a 1 b 2 c 3\r\nEXISTS a c\r\nDEL a b c k\r\n", "APPEND a x\r\nSETEX b 10 v\r\nSETNX b\r\nINCRBY a x\r\n",
		"MULTI\r\nINCR a\r\nGET k\r\nEXEC\r\n", "ZUNIONSTORE a 2 b k\r\nRENAME k b\r\nMSETNX a 1\r\nTYPE a\r\nSTRLEN a\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if testing.Short() {
			t.Skip("needs redis-server; skipped with -short")
		}
		if dangerous(in) {
			t.Skip("input would legitimately block or reconfigure the shared Redis")
		}
		addr := fuzzProxy(t)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(in)
		// Half-close: the proxy answers what it got, then sees EOF.
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("proxy did not answer and close within the deadline: %v", err)
		}
		other := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer other.Close()
		if err := other.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("proxy stopped serving others: %v", err)
		}
	})
}

// dangerous reports inputs that name commands which block by design or
// would reconfigure, stop or stall the Redis all inputs share.
func dangerous(in []byte) bool {
	l := strings.ToLower(string(in))
	for _, w := range []string{"shutdown", "debug", "pause", "replicaof", "slaveof", "acl", "config", "bl", "br", "bz",
		"wait", "xread", "subscribe", "monitor", "sleep", "failover", "module", "save", "migrate", "script",
		"function", "eval", "fcall", "flush", "cluster", "sync", "lolwut"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}
