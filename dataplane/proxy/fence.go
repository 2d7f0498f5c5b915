package proxy

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
// trip, and at most fenceMax (a command Redis does not answer at once,
// such as a module's blocking command, holds the others no longer).
//
// A fence a session raises is written by that session's goroutine, which
// the Go scheduler may not run for a while on a loaded machine (100-260
// ms were seen on two shared cores): counted from the raising, the 50 ms
// ran out before the command was written, and a PUBLISH went ahead of the
// SUBSCRIBE it followed. Such a fence (raiseUnsent) is bounded by
// orderMax until its command is written (sent), and by fenceMax from
// then on: the wait for Redis' answer is what fenceMax bounds.

// fenceMax bounds how long a fence holds other clients' commands once its
// own command is written.
const fenceMax = 50 * time.Millisecond

// orderMax bounds how long the proxy holds other clients' commands for one
// it has read and not yet written: a session's fence until it writes its
// command, and the waits for a session that has read a command and not
// yet handled it (arrivals_linux.go). Between the read and the write
// there is only the proxy's own work (and, rarely, a dial when no warm
// connection is ready), so this bound is reached only when the machine
// does not run the proxy's goroutines for that long.
const orderMax = time.Second

// fence is one command written and not yet answered.
type fence struct {
	done     chan struct{}
	timer    *time.Timer
	released bool // under fences.mu
}

// fences are the outstanding fences, oldest first.
type fences struct {
	n    atomic.Int32
	mu   sync.Mutex
	list []*fence
	// wake, if set, is called after a release (the event loop holds its
	// writes while a fence is up and must learn that it is down).
	wake func()
	// bound, if set, is called when a fence comes down by its bound, not
	// by Redis' answer (the ordering_bounds_reached_total metric).
	bound func()
}

// raise puts up a fence for a command written at once; release takes it
// down, at the latest after fenceMax.
func (fs *fences) raise() *fence { return fs.raiseFor(fenceMax) }

// raiseUnsent puts up a fence for a command written later: it is down at
// the latest orderMax from now, or fenceMax after sent.
func (fs *fences) raiseUnsent() *fence { return fs.raiseFor(orderMax) }

func (fs *fences) raiseFor(d time.Duration) *fence {
	f := &fence{done: make(chan struct{})}
	fs.mu.Lock()
	fs.list = append(fs.list, f)
	fs.n.Add(1)
	f.timer = time.AfterFunc(d, func() {
		if fs.release(f) && fs.bound != nil {
			fs.bound()
		}
	})
	fs.mu.Unlock()
	return f
}

// sent tells that f's command is written: f is down at the latest
// fenceMax from now (nil or released already: nothing).
func (fs *fences) sent(f *fence) {
	if f == nil {
		return
	}
	fs.mu.Lock()
	if !f.released {
		f.timer.Reset(fenceMax)
	}
	fs.mu.Unlock()
}

// release takes f down (nil or released already: nothing); it reports
// whether it did.
func (fs *fences) release(f *fence) bool {
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
	wake := fs.wake
	fs.mu.Unlock()
	if wake != nil {
		wake()
	}
	return true
}

// held reports a fence up.
func (fs *fences) held() bool { return fs.n.Load() > 0 }

// isReleased reports whether f is down.
func (fs *fences) isReleased(f *fence) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return f.released
}

// wait returns once the fences up now, raised before own (every one when
// own is nil), are down. Its cost without a fence is one atomic load.
func (fs *fences) wait(own *fence) {
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
		<-ch // each is down within fenceMax of its raising
	}
}
