package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	log, err := os.Create(logPath)
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
