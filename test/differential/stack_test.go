package differential

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// password is the Redis password of every topology behind the sidecar:
// production sets one, so the harness does.
const password = "diff-Pa55word"

// topology is a Redis deployment behind the sidecar.
type topology struct {
	name    string
	cluster bool
	// addrs are the sidecar's upstreams (every master).
	addrs []string
}

func topologies(t *testing.T) []topology {
	s := redistest.Standalone(t, "--requirepass", password)
	c := redistest.Cluster(t)
	// The cluster is created without a password (redis-cli --cluster
	// create would need it); its nodes get one before any client comes.
	for _, a := range c.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: a})
		for _, kv := range [][2]string{{"masterauth", password}, {"requirepass", password}} {
			if err := n.ConfigSet(context.Background(), kv[0], kv[1]).Err(); err != nil {
				t.Fatalf("CONFIG SET %s on %s: %v", kv[0], a, err)
			}
		}
		n.Close()
	}
	return []topology{
		{name: "standalone", addrs: []string{s.Addr}},
		{name: "cluster", cluster: true, addrs: c.Addrs()},
	}
}

// startSidecar runs the heatsink binary's sidecar as the injector runs it
// (the password from a mounted file, read at each new connection) in front
// of top, with tbl as its mounted routing table and no node agent, until
// the test ends, and returns its client address once it is ready.
func startSidecar(t *testing.T, top topology, tbl *routing.Table) string {
	t.Helper()
	bin := os.Getenv("HEATSINK_BIN")
	if bin == "" {
		t.Skip("HEATSINK_BIN is not set: run through make test, which builds bin/heatsink")
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := tbl.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rtFile := filepath.Join(dir, "routing.json")
	if err := os.WriteFile(rtFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	listen, httpAddr := freeAddr(t), freeAddr(t)
	args := []string{"sidecar", "--listen", listen, "--http-address", httpAddr,
		"--upstream", strings.Join(top.addrs, ","), "--routing-file", rtFile,
		"--redis-password-file", pwFile, "--node-agent", "", "--policy", tbl.Policy, "--namespace", "diff"}
	if top.cluster {
		args = append(args, "--cluster")
	}
	cmd := exec.Command(bin, args...)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("sidecar log:\n%s", tail(logs.String(), 4000))
		}
	})
	eventually.Succeeds(t, 30*time.Second, func() error {
		select {
		case <-done:
			return eventually.Permanent(errExited(logs.String()))
		default:
		}
		r, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return errStatus(r.StatusCode)
		}
		return nil
	})
	return listen
}

type errExited string

func (e errExited) Error() string { return "the sidecar exited:\n" + tail(string(e), 2000) }

type errStatus int

func (e errStatus) Error() string { return "/readyz answered " + strconv.Itoa(int(e)) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
