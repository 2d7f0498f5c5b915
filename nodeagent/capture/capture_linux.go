//go:build linux

package capture

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// Capture is one packet socket, its receive ring and its tracker.
//
// Why a ring (PACKET_RX_RING, TPACKET_V3) rather than a read per packet:
// the kernel writes packets into blocks of memory shared with the agent
// and wakes it once per full block or per retire timeout, not once per
// packet. At pipeline depth 1 every command is a packet, and a read per
// packet cost about 10 µs of CPU each (a wake-up and a copy): 95 % of a
// core per 100,000 commands/s in the bench, against a target of 5 %.
type Capture struct {
	cfg  Config
	fd   int
	ring []byte
	// file owns fd once Open succeeds (closing it closes fd); raw waits
	// for fd in the runtime's poller.
	file *os.File
	raw  syscall.RawConn

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
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture: TPACKET_V3: %w", err)
	}
	// A block retires when full or after retireMillis: the reader sees a
	// packet at most that late, and wakes at most that often when idle.
	blocks := max(cfg.BufferBytes/blockSize, 4)
	req := unix.TpacketReq3{Block_size: blockSize, Block_nr: uint32(blocks), Frame_size: frameSize,
		Frame_nr: uint32(blocks) * (blockSize / frameSize), Retire_blk_tov: retireMillis}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture: receive ring: %w", err)
	}
	ring, err := unix.Mmap(fd, 0, blocks*blockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture: map the receive ring: %w", err)
	}
	c.ring = ring
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		c.close()
		return nil, fmt.Errorf("capture: bind: %w", err)
	}
	// The reader waits for a block in the runtime's network poller rather
	// than in a blocking poll(2): a goroutine blocked in a system call
	// keeps its thread, and the scheduler hands its processor to another
	// thread after 20 µs, then takes it back when the call returns: at
	// every wake-up, a few context switches that cost more than the
	// block's packets at low rates. Non-blocking, os.NewFile registers the
	// socket with the poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		c.close()
		return nil, fmt.Errorf("capture: non-blocking socket: %w", err)
	}
	c.file = os.NewFile(uintptr(fd), "capture")
	if c.raw, err = c.file.SyscallConn(); err != nil {
		c.close()
		return nil, fmt.Errorf("capture: socket: %w", err)
	}
	return c, nil
}

// The ring's geometry: blocks of 256 KiB (a 64 KiB GSO packet fits),
// retired after 50 ms when not full. A block is handed over when full or
// retired, so at a low rate each block holds 50 ms of traffic: with the
// default 32 blocks the reader may stall 1.6 s before the kernel drops.
const (
	blockSize    = 256 << 10
	frameSize    = 1 << 11
	retireMillis = 50
)

// Offsets in a block (struct tpacket_block_desc, tpacket_hdr_v1) and in a
// packet's header (struct tpacket3_hdr).
const (
	blkStatus    = 8
	blkNumPkts   = 12
	blkFirstPkt  = 16
	pktNext      = 0
	pktSnaplen   = 12
	pktLen       = 16
	pktNet       = 26
	statusKernel = unix.TP_STATUS_KERNEL
	statusUser   = unix.TP_STATUS_USER
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// attach replaces the socket's filter (atomically: the kernel swaps it).
// It refuses once the socket is closed: its descriptor number may already
// belong to another socket of the process.
func (c *Capture) attach(prog []bpf.Instruction) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("capture: closed")
	}
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
	prog, err := program(s.Endpoints(), c.cfg.SampleEvery, c.cfg.ReplySampleEvery)
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
	tr := newTracker(c.cfg.Limits, c.cfg.SampleEvery, c.cfg.ReplySampleEvery)
	var seg segment
	lastFlush, lastSweep := time.Now(), time.Now()
	var drops, flushes uint64
	// losing: a block said the kernel dropped packets since the counter
	// was last read.
	losing := false
	blocks := len(c.ring) / blockSize
	// status is the current block's; ready, made once (a closure per
	// wait would be an allocation per wake-up), reads it.
	var status *uint32
	ready := func(uintptr) bool { return atomic.LoadUint32(status)&statusUser != 0 }
	for i := 0; ctx.Err() == nil; {
		blk := c.ring[i*blockSize : (i+1)*blockSize]
		status = (*uint32)(unsafe.Pointer(&blk[blkStatus]))
		if !ready(0) {
			// The kernel signals the socket readable when it hands a
			// block over; ready is checked again once the poller is
			// armed, so a block handed over meanwhile is not missed.
			// The reader wakes at the next flush at the latest (also
			// to see ctx end), and no earlier when idle: each wake-up
			// costs a few context switches.
			wait := max(time.Until(lastFlush.Add(c.cfg.FlushInterval)), time.Millisecond)
			if err := c.file.SetReadDeadline(time.Now().Add(wait)); err != nil {
				return fmt.Errorf("capture: poll: %w", err)
			}
			if err := c.raw.Read(ready); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("capture: poll: %w", err)
			}
		} else {
			now := time.Now().UnixNano()
			if s := c.pending.Swap(nil); s != nil {
				tr.flush(sink) // counts go to the targets they were counted for
				tr.setScope(*s)
			}
			n := binary.NativeEndian.Uint32(blk[blkNumPkts:])
			off := binary.NativeEndian.Uint32(blk[blkFirstPkt:])
			tr.beginBlock()
			for range n {
				if int(off)+unix.SizeofTpacket3Hdr > len(blk) {
					break
				}
				h := blk[off:]
				net := uint32(binary.NativeEndian.Uint16(h[pktNet:]))
				snap := binary.NativeEndian.Uint32(h[pktSnaplen:])
				wire := int(binary.NativeEndian.Uint32(h[pktLen:]))
				if int(off+net+snap) <= len(blk) && decodePacket(blk[off+net:off+net+snap], wire, &seg) {
					tr.packet(now, &seg)
				}
				next := binary.NativeEndian.Uint32(h[pktNext:])
				if next == 0 {
					break
				}
				off += next
			}
			tr.endBlock()
			losing = losing || atomic.LoadUint32(status)&unix.TP_STATUS_LOSING != 0
			atomic.StoreUint32(status, statusKernel) // the block goes back to the kernel
			i = (i + 1) % blocks
		}
		now := time.Now()
		if now.Sub(lastFlush) < c.cfg.FlushInterval {
			continue
		}
		lastFlush = now
		if s := c.pending.Swap(nil); s != nil {
			tr.flush(sink)
			tr.setScope(*s)
		}
		tr.flush(sink)
		flushes++
		sweep := now.Sub(lastSweep) > time.Second
		if sweep {
			lastSweep = now
			tr.sweep(now.UnixNano())
		}
		// The drop counter is read when a block says there were drops,
		// and once a second, not at every flush: the read is a system
		// call, and a system call from an otherwise idle process wakes
		// the runtime's sysmon from its deep sleep into a millisecond of
		// 20 µs sleeps, a context switch each (seen in perf after every
		// flush, ten a second).
		if sweep {
			// A socket bound to one interface gets ENETDOWN when that
			// interface goes down or away (af_packet's notifier unhooks
			// it): it captures nothing from then on, so Run says so and
			// returns instead of looking alive (the agent's readiness).
			if e, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
				return fmt.Errorf("capture: interface %q: %w", c.cfg.Interface, unix.Errno(e))
			}
		}
		if losing || sweep {
			losing = false
			if st, err := unix.GetsockoptTpacketStatsV3(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				drops += uint64(st.Drops) // reading resets the kernel's counters
			}
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
		if c.ring != nil {
			_ = unix.Munmap(c.ring)
		}
		if c.file != nil {
			_ = c.file.Close()
		} else {
			unix.Close(c.fd)
		}
	}
}
