package capture

import (
	"time"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// Config configures a Capture.
type Config struct {
	// Interface is the one interface to capture on; empty: all of them
	// (each packet is seen where it enters the node).
	Interface string
	// SampleEvery: one client connection in SampleEvery is captured, whole
	// (by a hash of its address and port, in the kernel), and its counts
	// are multiplied by SampleEvery. 0 or 1: every connection.
	SampleEvery uint32
	// ReplySampleEvery: the replies of one captured connection in
	// ReplySampleEvery are captured too (their headers only: the kernel
	// copies replySnap bytes of each packet), for the sizes of the keys
	// read. The same hash chooses them, so they are a subset of the
	// captured connections. 0: no replies.
	ReplySampleEvery uint32
	// Limits bound the tracker's memory.
	Limits Limits
	// FlushInterval is how often counts are handed on; default the
	// sidecars' (sidecarlink.FlushInterval), so the agent rates captured
	// keys as it rates a sidecar's.
	FlushInterval time.Duration
	// BufferBytes is the receive ring, in blocks of 256 KiB (default 8 MiB):
	// what absorbs a burst while the reader is descheduled. Packets beyond
	// it are dropped by the kernel (KernelDrops), never delayed: the
	// capture cannot slow the pods' traffic.
	BufferBytes int
}

func (c Config) withDefaults() Config {
	if c.SampleEvery == 0 {
		c.SampleEvery = 1
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = sidecarlink.FlushInterval
	}
	if c.BufferBytes <= 0 {
		c.BufferBytes = 8 << 20
	}
	return c
}

// DefaultReplySampleEvery is the node agent's default ReplySampleEvery
// (docs/capture.md, "Replies: big keys by size").
const DefaultReplySampleEvery = 8

// Stats are a capture's counters.
type Stats struct {
	TrackerStats
	// KernelDrops are packets the kernel dropped because the socket's
	// buffer was full (the reader fell behind).
	KernelDrops uint64
	// Flushes counts the hand-overs of counts (one per flush interval).
	Flushes uint64
}
