//go:build linux

package capture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// Capture is one packet socket and its tracker.
type Capture struct {
	cfg Config
	fd  int

	// pending is the next scope, taken by the reader at its next packet.
	pending atomic.Pointer[Scope]

	mu     sync.Mutex
	stats  Stats
	closed bool
}

// Open creates the packet socket on cfg.Interface (all interfaces if
// empty) with a filter that passes nothing until SetScope. It needs
// CAP_NET_RAW, and the host's network namespace to see the node's pods.
func Open(cfg Config) (*Capture, error) {
	cfg = cfg.withDefaults()
	ifindex := 0
	if cfg.Interface != "" {
		ifi, err := net.InterfaceByName(cfg.Interface)
		if err != nil {
			return nil, fmt.Errorf("capture: interface %q: %w", cfg.Interface, err)
		}
		ifindex = ifi.Index
	}
	// Protocol 0 receives nothing until bind names one: the drop-all
	// filter is in place before the first packet could queue.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("capture: packet socket (needs CAP_NET_RAW): %w", err)
	}
	c := &Capture{cfg: cfg, fd: fd}
	if err := c.attach([]bpf.Instruction{bpf.RetConstant{Val: 0}}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, cfg.BufferBytes); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.BufferBytes)
	}
	// The reader wakes at least this often to flush and to see its
	// context end.
	tv := unix.NsecToTimeval(int64(cfg.FlushInterval / 2))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture: receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture: bind: %w", err)
	}
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// attach replaces the socket's filter (atomically: the kernel swaps it).
func (c *Capture) attach(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("capture: filter: %w", err)
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fp := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.SetsockoptSockFprog(c.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp); err != nil {
		return fmt.Errorf("capture: attach filter: %w", err)
	}
	return nil
}

// SetScope sets what is captured and counted: the filter is replaced at
// once, the tracker takes the scope at its next packet or wake-up.
func (c *Capture) SetScope(s Scope) error {
	prog, err := program(s.Endpoints(), c.cfg.SampleEvery)
	if err != nil {
		return err
	}
	if err := c.attach(prog); err != nil {
		return err
	}
	c.pending.Store(&s)
	return nil
}

// Stats returns the counters as of the last flush.
func (c *Capture) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Run reads packets until ctx ends, handing counts to sink every flush
// interval (from Run's goroutine). It closes the socket on return.
func (c *Capture) Run(ctx context.Context, sink func(policy string, entries []sidecarlink.Entry)) error {
	defer c.close()
	tr := newTracker(c.cfg.Limits, c.cfg.SampleEvery)
	buf := make([]byte, snapLen)
	var seg segment
	lastFlush, lastSweep := time.Now(), time.Now()
	var drops, flushes uint64
	for ctx.Err() == nil {
		n, err := unix.Read(c.fd, buf)
		now := time.Now()
		if s := c.pending.Swap(nil); s != nil {
			tr.flush(sink) // counts go to the targets they were counted for
			tr.setScope(*s)
		}
		switch {
		case err == nil:
			if decodeIPv4TCP(buf[:n], &seg) {
				tr.packet(now.UnixNano(), &seg)
			}
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
		default:
			return fmt.Errorf("capture: read: %w", err)
		}
		if now.Sub(lastFlush) < c.cfg.FlushInterval {
			continue
		}
		lastFlush = now
		tr.flush(sink)
		flushes++
		if now.Sub(lastSweep) > time.Second {
			lastSweep = now
			tr.sweep(now.UnixNano())
		}
		if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			drops += uint64(st.Drops) // reading resets the kernel's counters
		}
		c.mu.Lock()
		c.stats = Stats{TrackerStats: tr.statsNow(), KernelDrops: drops, Flushes: flushes}
		c.mu.Unlock()
	}
	return nil
}

func (c *Capture) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		unix.Close(c.fd)
	}
}
