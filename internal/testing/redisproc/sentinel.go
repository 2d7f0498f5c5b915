package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// ErrNoSentinel is returned when redis-sentinel is not installed.
var ErrNoSentinel = errors.New("redis-sentinel not found: run `make redis` or `apt-get install -y redis-sentinel`")

// SentinelOptions tunes a started Sentinel deployment.
type SentinelOptions struct {
	// MasterName is the name the Sentinels monitor the master under
	// (default "mymaster").
	MasterName string
	// Replicas is the number of replicas of the master (default 2).
	Replicas int
	// Sentinels is the number of Sentinels (default 3); the quorum is a
	// majority of them.
	Sentinels int
	// DownAfter is Sentinel's down-after-milliseconds (default 1s).
	DownAfter time.Duration
	// FailoverTimeout is Sentinel's failover-timeout (default 3s).
	FailoverTimeout time.Duration
	// Password, if set, is the data nodes' requirepass (and masterauth),
	// which the Sentinels are told with auth-pass.
	Password string
	// SentinelPassword, if set, is the Sentinels' own requirepass.
	SentinelPassword string
}

// Sentinel is a running master, its replicas and the Sentinels that
// monitor them: real redis-server and redis-sentinel processes.
type Sentinel struct {
	Opts SentinelOptions
	// Data are the master (first, at start) and its replicas.
	Data []*Server
	// Sentinels are the redis-sentinel processes.
	Sentinels []*Server
	dir       string
}

// SentinelAddrs are the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string { return addrs(s.Sentinels) }

// StartSentinel starts a master, its replicas and the Sentinels, and waits
// until every replica is in sync and every Sentinel knows every replica and
// every other Sentinel (so that a failover can be agreed on).
func StartSentinel(ctx context.Context, opts SentinelOptions) (*Sentinel, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		return nil, ErrNoSentinel
	}
	if opts.MasterName == "" {
		opts.MasterName = "mymaster"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 3 * time.Second
	}
	dir, err := os.MkdirTemp("", "heatsink-redis-sentinel-")
	if err != nil {
		return nil, err
	}
	s := &Sentinel{Opts: opts, dir: dir}
	var auth []string
	if opts.Password != "" {
		auth = []string{"--requirepass", opts.Password, "--masterauth", opts.Password}
	}
	m, err := start(ctx, Options{Dir: dir, ExtraArgs: auth}, false)
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.Data = append(s.Data, m)
	for i := 0; i < opts.Replicas; i++ {
		r, err := start(ctx, Options{Dir: dir, ExtraArgs: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(m.Port)}, auth...)}, false)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.Data = append(s.Data, r)
	}
	for i := 0; i < opts.Sentinels; i++ {
		x, err := s.startOne(ctx, m.Port)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, x)
	}
	err = eventually.PollEvery(ctx, 50*time.Millisecond, 60*time.Second, func() error {
		for _, r := range s.Data[1:] {
			info, err := s.DataCommand(r.Addr, "INFO", "replication")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica %s not in sync yet", r.Addr)
			}
		}
		for _, x := range s.Sentinels {
			f, err := s.masterFields(x.Addr)
			if err != nil {
				return err
			}
			if f["num-slaves"] != strconv.Itoa(opts.Replicas) || f["num-other-sentinels"] != strconv.Itoa(opts.Sentinels-1) {
				return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels so far", x.Addr, f["num-slaves"], f["num-other-sentinels"])
			}
		}
		return nil
	})
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) startOne(ctx context.Context, masterPort int) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			return nil, err
		}
		pdir := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(port))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return nil, err
		}
		o := s.Opts
		conf := []string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			"dir " + pdir,
			"logfile " + filepath.Join(pdir, "sentinel.log"),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", o.MasterName, masterPort, o.Sentinels/2+1),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", o.MasterName, o.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", o.MasterName, o.FailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s %d", o.MasterName, o.Replicas),
		}
		if o.Password != "" {
			conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", o.MasterName, o.Password))
		}
		if o.SentinelPassword != "" {
			// Sentinels authenticate to each other with sentinel-pass.
			conf = append(conf, "requirepass "+o.SentinelPassword, "sentinel sentinel-pass "+o.SentinelPassword)
		}
		file := filepath.Join(pdir, "sentinel.conf")
		if err := os.WriteFile(file, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.Command("redis-sentinel", file)
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-sentinel: %w", err)
		}
		x := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(x.done) }()
		err = eventually.Poll(ctx, 10*time.Second, func() error {
			select {
			case <-x.done:
				log, _ := os.ReadFile(filepath.Join(pdir, "sentinel.log"))
				return eventually.Permanent(fmt.Errorf("redis-sentinel on port %d exited: %s", port, tail(string(log))))
			default:
				_, err := s.SentinelCommand(x.Addr, "PING")
				return err
			}
		})
		if err == nil {
			return x, nil
		}
		x.Stop()
		lastErr = err
	}
	return nil, lastErr
}

// SentinelCommand sends one command to the Sentinel at addr (authenticated
// when the Sentinels have a password) and returns the reply as text.
func (s *Sentinel) SentinelCommand(addr string, args ...string) (string, error) {
	return commandAuth(addr, s.Opts.SentinelPassword, args...)
}

// DataCommand sends one command to the data node at addr.
func (s *Sentinel) DataCommand(addr string, args ...string) (string, error) {
	return commandAuth(addr, s.Opts.Password, args...)
}

// Master is the master's address as the first Sentinel that answers knows it.
func (s *Sentinel) Master() (string, error) {
	var lastErr error
	for _, x := range s.Sentinels {
		out, err := commandLines(x.Addr, s.Opts.SentinelPassword, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Opts.MasterName)
		if err == nil && len(out) == 2 {
			return net.JoinHostPort(out[0], out[1]), nil
		}
		lastErr = fmt.Errorf("sentinel %s: %v %v", x.Addr, out, err)
	}
	return "", lastErr
}

// Failover asks the first Sentinel for a failover (SENTINEL FAILOVER) and
// waits until every Sentinel names a new master, that master reports the
// role master and the old one has become its replica. It returns the new
// master's address.
func (s *Sentinel) Failover(ctx context.Context) (string, error) {
	old, err := s.Master()
	if err != nil {
		return "", err
	}
	if out, err := s.SentinelCommand(s.Sentinels[0].Addr, "SENTINEL", "FAILOVER", s.Opts.MasterName); err != nil || out != "OK" {
		return "", fmt.Errorf("SENTINEL FAILOVER: %q %v", out, err)
	}
	return s.WaitMaster(ctx, old)
}

// WaitMaster waits until every Sentinel agrees on a master other than old,
// that master reports the role master and every other data node replicates
// from it in sync. Sentinel turns a reachable old master into a replica
// some seconds after the switch; the wait includes that.
func (s *Sentinel) WaitMaster(ctx context.Context, old string) (string, error) {
	var master string
	err := eventually.PollEvery(ctx, 50*time.Millisecond, 60*time.Second, func() error {
		master = ""
		for _, x := range s.Sentinels {
			out, err := commandLines(x.Addr, s.Opts.SentinelPassword, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Opts.MasterName)
			if err != nil || len(out) != 2 {
				return fmt.Errorf("sentinel %s: %v %v", x.Addr, out, err)
			}
			a := net.JoinHostPort(out[0], out[1])
			if a == old {
				return fmt.Errorf("sentinel %s still names %s", x.Addr, old)
			}
			if master != "" && a != master {
				return fmt.Errorf("sentinels disagree: %s and %s", master, a)
			}
			master = a
		}
		role, err := commandLines(master, s.Opts.Password, "ROLE")
		if err != nil || len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("new master %s reports role %v (%v)", master, role, err)
		}
		for _, d := range s.Data {
			if d.Addr == master {
				continue
			}
			info, err := s.DataCommand(d.Addr, "INFO", "replication")
			if err != nil {
				return err
			}
			_, port, _ := net.SplitHostPort(master)
			if !strings.Contains(info, "master_port:"+port+"\r") || !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("data node %s does not replicate from %s in sync yet", d.Addr, master)
			}
		}
		return nil
	})
	return master, err
}

func (s *Sentinel) masterFields(addr string) (map[string]string, error) {
	out, err := commandLines(addr, s.Opts.SentinelPassword, "SENTINEL", "MASTER", s.Opts.MasterName)
	if err != nil {
		return nil, err
	}
	f := map[string]string{}
	for i := 0; i+1 < len(out); i += 2 {
		f[out[i]] = out[i+1]
	}
	return f, nil
}

// Stop stops every process and removes their files.
func (s *Sentinel) Stop() {
	for _, x := range s.Sentinels {
		x.Stop()
	}
	for _, d := range s.Data {
		d.Stop()
	}
	_ = os.RemoveAll(s.dir)
}

// commandAuth sends one command with redis-cli (AUTH first when password
// is set) and returns its output, trimmed.
func commandAuth(addr, password string, args ...string) (string, error) {
	out, err := commandLines(addr, password, args...)
	return strings.Join(out, "\n"), err
}

func commandLines(addr, password string, args ...string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cli := []string{"-h", host, "-p", port, "--no-auth-warning"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "redis-cli", append(cli, args...)...)
	if password != "" {
		// From the environment, not the command line (ps shows it).
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("redis-cli %s %v: %w", addr, args, err)
	}
	text := strings.TrimRight(string(out), "\n")
	if strings.HasPrefix(text, "ERR") || strings.HasPrefix(text, "NOAUTH") || strings.HasPrefix(text, "WRONGPASS") {
		return nil, fmt.Errorf("%s %v: %s", addr, args, text)
	}
	if text == "" {
		return nil, nil
	}
	return strings.Split(text, "\n"), nil
}
