// Package order keeps the proxy's ordering rule across clients
// (docs/proxy-internals.md, Ordering): the order in which clients' bytes
// came, read from the kernel's receive stamps (stamp_linux.go), the wait
// of a session's commands for earlier ones of other sessions
// (arrivals_linux.go), and the fences that hold commands read after one
// that went on a connection of its own until Redis has answered it.
package order

import (
	"sync"
	"sync/atomic"
	"time"
)

// Fences keep the Ordering rule of docs/proxy.md for a command that gives
// its client a connection of its own (SUBSCRIBE, MONITOR, SELECT, MULTI,
// WATCH, an unknown command, ...). Such a command reaches Redis on another
// connection than the commands other clients send after it, and writing
// it first is not enough: Redis reads its readable connections in the
// order its level-triggered epoll lists them, where a connection that was
// busy a moment ago comes before one that has just become readable. A
// SUBSCRIBE written on a fresh connection lost to a PUBLISH written
// microseconds later on the busy shared one in 28 of 1,000 tries. So from
// the moment such a command is written until Redis has answered it (so
// has run it), the proxy writes no command read after it: the event loop
// holds its writes, sessions wait before theirs. A fence lasts one round
// trip, and at most FenceMax (a command Redis does not answer at once,
// such as a module's blocking command, holds the others no longer).
//
// A fence a session raises is written by that session's goroutine, which
// the Go scheduler may not run for a while on a loaded machine (100-260
// ms were seen on two shared cores): counted from the raising, the 50 ms
// ran out before the command was written, and a PUBLISH went ahead of the
// SUBSCRIBE it followed. Such a fence (RaiseUnsent) is bounded by
// Max until its command is written (sent), and by FenceMax from
// then on: the wait for Redis' answer is what FenceMax bounds.

// FenceMax bounds how long a fence holds other clients' commands once its
// own command is written.
const FenceMax = 50 * time.Millisecond

// Max bounds how long the proxy holds other clients' commands for one
// it has read and not yet written: a session's fence until it writes its
// command, and the waits for a session that has read a command and not
// yet handled it (arrivals_linux.go). Between the read and the write
// there is only the proxy's own work (and, rarely, a dial when no warm
// connection is ready), so this bound is reached only when the machine
// does not run the proxy's goroutines for that long.
const Max = time.Second

// Fence is one command written and not yet answered.
type Fence struct {
	done     chan struct{}
	timer    *time.Timer
	released bool // under Fences.mu
}

// Fences are the outstanding Fences, oldest first.
type Fences struct {
	n    atomic.Int32
	mu   sync.Mutex
	list []*Fence
	// Wake, if set, is called after a release (the event loop holds its
	// writes while a fence is up and must learn that it is down).
	Wake func()
	// Bound, if set, is called when a fence comes down by its bound, not
	// by Redis' answer (the ordering_bounds_reached_total metric).
	Bound func()
}

// Raise puts up a fence for a command written at once; release takes it
// down, at the latest after FenceMax.
func (fs *Fences) Raise() *Fence { return fs.raiseFor(FenceMax) }

// RaiseUnsent puts up a fence for a command written later: it is down at
// the latest Max from now, or FenceMax after sent.
func (fs *Fences) RaiseUnsent() *Fence { return fs.raiseFor(Max) }

func (fs *Fences) raiseFor(d time.Duration) *Fence {
	f := &Fence{done: make(chan struct{})}
	fs.mu.Lock()
	fs.list = append(fs.list, f)
	fs.n.Add(1)
	f.timer = time.AfterFunc(d, func() {
		if fs.Release(f) && fs.Bound != nil {
			fs.Bound()
		}
	})
	fs.mu.Unlock()
	return f
}

// Sent tells that f's command is written: f is down at the latest
// FenceMax from now (nil or released already: nothing).
func (fs *Fences) Sent(f *Fence) {
	if f == nil {
		return
	}
	fs.mu.Lock()
	if !f.released {
		f.timer.Reset(FenceMax)
	}
	fs.mu.Unlock()
}

// Release takes f down (nil or released already: nothing); it reports
// whether it did.
func (fs *Fences) Release(f *Fence) bool {
	if f == nil {
		return false
	}
	fs.mu.Lock()
	if f.released {
		fs.mu.Unlock()
		return false
	}
	f.released = true
	f.timer.Stop()
	close(f.done)
	for i, x := range fs.list {
		if x == f {
			fs.list = append(fs.list[:i], fs.list[i+1:]...)
			break
		}
	}
	if len(fs.list) == 0 {
		fs.list = nil
	}
	fs.n.Add(-1)
	wake := fs.Wake
	fs.mu.Unlock()
	if wake != nil {
		wake()
	}
	return true
}

// Held reports a fence up.
func (fs *Fences) Held() bool { return fs.n.Load() > 0 }

// Up counts the fences up.
func (fs *Fences) Up() int32 { return fs.n.Load() }

// IsReleased reports whether f is down.
func (fs *Fences) IsReleased(f *Fence) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return f.released
}

// Wait returns once the Fences up now, raised before own (every one when
// own is nil), are down. Its cost without a fence is one atomic load.
func (fs *Fences) Wait(own *Fence) {
	if fs.n.Load() == 0 {
		return
	}
	fs.mu.Lock()
	var ahead []chan struct{}
	for _, f := range fs.list {
		if f == own {
			break
		}
		ahead = append(ahead, f.done)
	}
	fs.mu.Unlock()
	for _, ch := range ahead {
		<-ch // each is down within FenceMax of its raising
	}
}
