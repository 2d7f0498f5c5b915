package differential

import (
	"context"
	"io"
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
	"github.com/heatsink-dev/heatsink/internal/testing/heatsinkbin"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// password is the Redis password of every topology behind the sidecar,
// and sentinelPassword the Sentinels' own: production sets them, so the
// harness does.
const (
	password         = "diff-Pa55word"
	sentinelPassword = "diff-Sentinel-Pa55"
)

// topology is a Redis deployment behind the sidecar.
type topology struct {
	name    string
	cluster bool
	// addrs are the sidecar's upstreams (every master); behind Sentinel,
	// the master at the start (the harness makes no failover).
	addrs []string
	// sentinels and master name the Sentinels and the master they
	// monitor, when the sidecar follows them instead of addrs.
	sentinels []string
	master    string
	// replicas are the table's replica addresses for replica reads (a
	// Sentinel set's come from the Sentinels; a cluster in the harness
	// has none, so its replica reads go to the masters).
	replicas []string
}

func topologies(t *testing.T) []topology {
	s := redistest.Standalone(t, "--requirepass", password)
	r := redistest.Standalone(t, "--requirepass", password, "--masterauth", password,
		"--replicaof", "127.0.0.1", strconv.Itoa(s.Port))
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
	out := []topology{
		{name: "standalone", addrs: []string{s.Addr}, replicas: []string{r.Addr}},
		{name: "cluster", cluster: true, addrs: c.Addrs()},
	}
	if redisproc.Available() == nil {
		if _, err := exec.LookPath("redis-sentinel"); err == nil {
			sn := redistest.Sentinel(t, redisproc.SentinelOptions{Replicas: 1, Sentinels: 1, Password: password, SentinelPassword: sentinelPassword})
			out = append(out, topology{name: "sentinel", addrs: []string{sn.Data[0].Addr}, sentinels: sn.SentinelAddrs(), master: sn.Opts.MasterName})
		} else {
			t.Log("redis-sentinel is not installed (make redis installs it): no Sentinel topology")
		}
	}
	return out
}

// startSidecar runs the heatsink binary's sidecar as the injector runs it
// (the password from a mounted file, read at each new connection) in front
// of top, with tbl as its mounted routing table and no node agent, until
// the test ends, and returns its client address and its metrics URL once
// it is ready.
func startSidecar(t *testing.T, top topology, tbl *routing.Table) (addr, metrics string) {
	t.Helper()
	bin := heatsinkbin.Path(t)
	dir := t.TempDir()
	pwFile, sentinelPwFile := filepath.Join(dir, "password"), filepath.Join(dir, "sentinel-password")
	for f, pw := range map[string]string{pwFile: password, sentinelPwFile: sentinelPassword} {
		if err := os.WriteFile(f, []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
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
	args := []string{"sidecar", "--listen", listen, "--http-address", httpAddr, "--routing-file", rtFile,
		"--redis-password-file", pwFile, "--node-agent", "", "--policy", tbl.Policy, "--namespace", "diff"}
	switch {
	case top.sentinels != nil:
		args = append(args, "--sentinel", strings.Join(top.sentinels, ","), "--sentinel-master", top.master,
			"--sentinel-password-file", sentinelPwFile)
	case top.cluster:
		args = append(args, "--upstream", strings.Join(top.addrs, ","), "--cluster")
	default:
		args = append(args, "--upstream", strings.Join(top.addrs, ","))
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
	return listen, "http://" + httpAddr + "/metrics"
}

// counter is the value of a counter the sidecar exposes, summed over its
// series (0 when it has none).
func counter(t *testing.T, url, name string) float64 {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
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
