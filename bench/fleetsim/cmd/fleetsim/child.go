package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the orchestrator started (the manager, a node
// simulator). It is stopped by its PID, never by name.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's, once done is closed
}

// startChild starts argv with env added to the orchestrator's, stderr (and
// stdout, unless stdout is given) to logPath. The child is killed if the
// orchestrator dies (Pdeathsig), so that an orchestrator killed outright
// leaves no manager or simulator behind.
func startChild(name string, argv, env []string, logPath string, stdout *os.File) (*child, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // a restarted child appends
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child holds its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = log
	cmd.Stdout = log
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the
// exit.
func (c *child) stop(grace time.Duration) {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return
	case <-time.After(grace):
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}

// pipe is an os.Pipe whose write end a child gets as its stdout: the reader
// reads to EOF on its own, independent of Wait.
func pipe() (r io.ReadCloser, w *os.File, err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, errors.Join(errors.New("pipe"), err)
	}
	return pr, pw, nil
}

// cpuSeconds is the CPU time of a child that exited (its /proc entry is
// gone; its rusage is not); 0 while it runs.
func (c *child) cpuSeconds() float64 {
	if !c.exited() || c.cmd.ProcessState == nil {
		return 0
	}
	return (c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()).Seconds()
}

// lastLine is the last non-empty line of a log, at most 300 bytes of it.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	l := lines[len(lines)-1]
	if len(l) > 300 {
		l = l[:300] + "…"
	}
	return l
}

// supervisor restarts the manager when it exits, as its Deployment would
// (after the kubelet's first back-off, 10 s), and says so: under load the
// legacy manager loses its lease and exits.
type supervisor struct {
	start   func() (*child, error)
	logPath string
	procs   *procSet

	mu       sync.Mutex
	cur      *child
	exits    []string
	restarts int
}

// RestartDelay is the kubelet's first crash back-off.
const restartDelay = 10 * time.Second

func (s *supervisor) current() *child {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// run watches the manager until ctx ends.
func (s *supervisor) run(ctx context.Context, t0 time.Time) {
	for {
		c := s.current()
		select {
		case <-ctx.Done():
			return
		case <-c.done:
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.exits = append(s.exits, fmt.Sprintf("manager exited %.0f s into the run (%v): %s", time.Since(t0).Seconds(), c.err, lastLine(s.logPath)))
		s.mu.Unlock()
		s.procs.replaced("manager", c)
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartDelay):
		}
		n, err := s.start()
		if err != nil {
			s.mu.Lock()
			s.exits = append(s.exits, fmt.Sprintf("manager restart failed: %v", err))
			s.mu.Unlock()
			return
		}
		s.procs.setPID("manager", n.pid())
		s.mu.Lock()
		s.cur, s.restarts = n, s.restarts+1
		s.mu.Unlock()
	}
}

func (s *supervisor) stop(grace time.Duration) {
	if c := s.current(); c != nil {
		c.stop(grace)
	}
}
