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

// fenceMax bounds how long a fence holds other clients' commands.
const fenceMax = 50 * time.Millisecond

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
}

// raise puts up a fence; release takes it down, at the latest after
// fenceMax.
func (fs *fences) raise() *fence {
	f := &fence{done: make(chan struct{})}
	fs.mu.Lock()
	fs.list = append(fs.list, f)
	fs.n.Add(1)
	f.timer = time.AfterFunc(fenceMax, func() { fs.release(f) })
	fs.mu.Unlock()
	return f
}

// release takes f down (nil or released already: nothing).
func (fs *fences) release(f *fence) {
	if f == nil {
		return
	}
	fs.mu.Lock()
	if f.released {
		fs.mu.Unlock()
		return
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
