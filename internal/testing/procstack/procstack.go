// Package procstack runs heatsink's own processes for tests that must run
// a given binary, not this tree's packages: the manager, node agents and
// sidecars of any heatsink binary (this tree's, or the previous release's
// for the version skew test) against a real kube-apiserver and a real
// redis-server, each bound to 127.0.0.1 on free ports, each stopped by the
// test's cleanup. Every process logs to a file of the test's temporary
// directory, whose tail the test prints when it fails.
package procstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// Proc is one running process.
type Proc struct {
	Name string
	Log  string // its output
	cmd  *exec.Cmd
	done chan error
}

// start runs bin with args and env (added to this process'), logging to a
// file, and stops it (SIGTERM, then SIGKILL after 10 s) at cleanup.
func start(t testing.TB, name, bin string, args, env []string) *Proc {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: %v", name, err)
	}
	p := &Proc{Name: name, Log: log, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s (%s %s), last of its log:\n%s", name, bin, strings.Join(args, " "), p.Tail(3000))
		}
	})
	return p
}

// Stop ends the process and waits for it (idempotent).
func (p *Proc) Stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.done <- nil // a later Stop returns at once
}

// Exited is the process' end, if it has ended.
func (p *Proc) Exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		if err == nil {
			err = errors.New("exited")
		}
		return err
	default:
		return nil
	}
}

// Tail is the last n bytes of the process' log.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// FreePort is a free TCP port of 127.0.0.1 whose UDP twin is free too
// (the node agent listens on both).
func FreePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		ln.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return 0
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// SupportsFlag says whether bin's subcommand sub has flag name: a test
// passes a flag a release added only to the binaries that have it.
func SupportsFlag(bin, sub, name string) bool {
	out, _ := exec.Command(bin, sub, "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ") || strings.Contains(string(out), "-"+name+"\n")
}

// Namespace is the manager's namespace (POD_NAMESPACE), where its fleet
// token Secret lives.
const Namespace = "heatsink-system"

// Token is the fleet token the manager reads from its Secret and the
// node agents present.
const Token = "skew-fleet-token"

// Manager is a running `heatsink manager`.
type Manager struct {
	*Proc
	Fleet string // the fleet server's address, for node agents
}

// StartManager runs bin's manager against cp: no leader election, no
// webhooks (tests create policies with their defaults applied), metrics
// over plain HTTP, the fleet over plaintext with Token, epochs announced
// 1 s ahead (every part is on this machine). It returns once the fleet
// server accepts connections. extra are more flags.
func StartManager(t testing.TB, cp *controlplane.ControlPlane, bin string, extra ...string) *Manager {
	t.Helper()
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, Namespace); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "heatsink-fleet-token"},
		Data: map[string][]byte{"token": []byte(Token)}}
	if err := cp.Client.Create(ctx, sec); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.Kubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	fleet := addr(FreePort(t))
	args := append([]string{"manager",
		"--metrics-bind-address=" + addr(FreePort(t)), "--metrics-secure=false",
		"--health-probe-bind-address=" + addr(FreePort(t)),
		fmt.Sprintf("--webhook-port=%d", FreePort(t)), "--enable-webhooks=false",
		"--leader-elect=false", "--epoch-margin=1s",
		"--fleet-bind-address=" + fleet, "--fleet-tls=false"}, extra...)
	p := start(t, "manager", bin, args, []string{"KUBECONFIG=" + kc, "POD_NAMESPACE=" + Namespace})
	eventually.Succeeds(t, 60*time.Second, func() error {
		if err := p.Exited(); err != nil {
			return eventually.Permanent(fmt.Errorf("manager: %v:\n%s", err, p.Tail(2000)))
		}
		c, err := net.DialTimeout("tcp", fleet, time.Second)
		if err != nil {
			return fmt.Errorf("the manager's fleet server: %w", err)
		}
		return c.Close()
	})
	return &Manager{Proc: p, Fleet: fleet}
}

// Agent is a running `heatsink node-agent`.
type Agent struct {
	*Proc
	Node    string
	Addr    string // counts (UDP) and routing (TCP), for sidecars
	Metrics string // its /metrics URL
}

// StartAgent runs bin's node agent for node, connected to m. It returns
// once the agent is ready (its /readyz: connected to the manager).
func StartAgent(t testing.TB, bin, node string, m *Manager) *Agent {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(Token), 0o600); err != nil {
		t.Fatal(err)
	}
	listen, metrics, probe := addr(FreePort(t)), addr(FreePort(t)), addr(FreePort(t))
	p := start(t, "node-agent-"+node, bin, []string{"node-agent", "--node-name=" + node, "--listen=" + listen,
		"--manager-address=" + m.Fleet, "--token-file=" + tok, "--tls-ca-file=",
		"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probe}, nil)
	eventually.Succeeds(t, 60*time.Second, func() error {
		if err := p.Exited(); err != nil {
			return eventually.Permanent(fmt.Errorf("node agent %s: %v:\n%s", node, err, p.Tail(2000)))
		}
		return httpOK("http://" + probe + "/readyz")
	})
	return &Agent{Proc: p, Node: node, Addr: listen, Metrics: "http://" + metrics + "/metrics"}
}

// Sidecar is a running `heatsink sidecar`.
type Sidecar struct {
	*Proc
	Addr    string // where the application connects
	Metrics string // its /metrics URL
}

// StartSidecar runs bin's sidecar for namespace/policy in front of
// upstream, reporting to a. It serves at once (--startup-wait=0), as a pod
// started before its policy's first table; the caller waits for PING.
// A pod's sidecar talks to its agent from the pod's address, which here
// is 127.0.0.1: the caller registers its pod with that address, one pod
// per node.
func StartSidecar(t testing.TB, bin string, a *Agent, upstream, namespace, policy string) *Sidecar {
	t.Helper()
	listen, http := addr(FreePort(t)), addr(FreePort(t))
	p := start(t, "sidecar-"+a.Node, bin, []string{"sidecar", "--listen=" + listen, "--upstream=" + upstream,
		"--policy=" + policy, "--namespace=" + namespace, "--node-agent=" + a.Addr,
		"--routing-file=" + filepath.Join(t.TempDir(), "none.json"), "--http-address=" + http, "--startup-wait=0"}, nil)
	return &Sidecar{Proc: p, Addr: listen, Metrics: "http://" + http + "/metrics"}
}

func httpOK(url string) error {
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return err
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, r.Status)
	}
	return nil
}
