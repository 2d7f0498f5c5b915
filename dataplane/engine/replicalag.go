package engine

import (
	"errors"
	"fmt"
	"time"
)

// The pure decisions of replica reads: a replica's lag from replication
// offsets, and which replica serves the next read.

// offsetSample is a master's replication offset at a moment: at is when
// its reply came back (the master had the offset by then), sent when the
// request left (the offset covers every write acknowledged before then).
type offsetSample struct {
	at     time.Time
	offset int64
	sent   time.Time
}

// offsetHistory is a master's recent offsets, oldest first, at most max
// of them (one per lag check).
type offsetHistory struct {
	samples []offsetSample
	max     int
}

// maxHistory bounds a shard's history whatever maxLag is: 1,024 samples
// (about 40 KiB per shard) cover a maxLag of 1,024 check intervals, 17
// minutes at the 1 s default. A replica further behind than the history
// reaches is not measured, so not read: the bound holds, only replica
// reads a larger maxLag would allow are given up.
const maxHistory = 1024

// historyFor is how many samples a shard keeps so that a replica within
// maxLag can be measured and read: one that holds every write of maxLag
// ago holds the offset of a sample sent at most one check interval before
// that, so the samples must reach maxLag plus one interval back, plus one
// for the check in progress and one for rounding.
func historyFor(maxLag, check time.Duration) int {
	if check <= 0 {
		return maxHistory
	}
	n := int((maxLag+check-1)/check) + 2
	return min(max(n, 3), maxHistory)
}

func (h *offsetHistory) add(s offsetSample) {
	if n := len(h.samples); n > 0 && s.offset < h.samples[n-1].offset {
		// The offset went back: a new master (a failover, or a restart
		// that lost its history). Nothing older describes it.
		h.samples = h.samples[:0]
	}
	if limit := max(h.max, 1); len(h.samples) >= limit {
		drop := len(h.samples) - limit + 1
		copy(h.samples, h.samples[drop:])
		h.samples = h.samples[:len(h.samples)-drop]
	}
	h.samples = append(h.samples, s)
}

// lagOf is how far behind its master a replica is known to be, given the
// master's history (its last sample taken just before the replica's offset
// was read, at now): the replica lacks what the master had written at the
// first sample whose offset passes the replica's, so it is at least now
// minus that sample's time behind. A replica at or past the newest sample
// has lag 0. It is a lower bound, exact to one check interval (the read
// bound, usableReplica, takes the upper one from caughtUpTo). ok is false
// without any sample, and for a replica behind every sample: it lacks
// writes older than the whole history, which right after a start or a
// failover is a few milliseconds long, so how far behind it is cannot be
// told.
func lagOf(h []offsetSample, replica int64, now time.Time) (lag time.Duration, ok bool) {
	if len(h) == 0 || replica < h[0].offset {
		return 0, false
	}
	if replica >= h[len(h)-1].offset {
		return 0, true
	}
	for _, s := range h {
		if s.offset > replica {
			return max(now.Sub(s.at), 0), true
		}
	}
	return 0, true // unreachable: the newest sample passes replica
}

// caughtUpTo is when the newest sample of the master's history that the
// replica has wholly applied (its offset is at least the sample's) was
// requested: the replica holds every write the master had acknowledged
// before then. ok is false when it is behind every sample.
func caughtUpTo(h []offsetSample, replica int64) (at time.Time, ok bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].offset <= replica {
			return h[i].sent, true
		}
	}
	return time.Time{}, false
}

// usableReplica says whether a replica may serve a read at now. Its last
// check measured it (lag, from lagOf, is not lagUnknown) within maxLag;
// and it is known to hold every write the master acknowledged up to
// maxLag plus one check interval before now (caughtUp, its caughtUpTo,
// is that recent), which is the staleness bound a read from it keeps
// whatever happened since the check: a check that is late or slow does
// not stretch it. When this process wrote the key at wrote (non-zero),
// the replica must also be known to hold that write (caughtUp is not
// before it), so a client reads its own writes.
func usableReplica(lag, maxLag, check time.Duration, caughtUp, now, wrote time.Time) bool {
	if lag < 0 || lag > maxLag || caughtUp.IsZero() || now.Sub(caughtUp) > maxLag+check {
		return false
	}
	return wrote.IsZero() || !caughtUp.Before(wrote)
}

// pickReplica is the index of the replica that serves the next read: the
// (start mod n)-th of the n usable replicas (usableReplica), so successive
// starts spread reads evenly over the usable ones (a skipped replica's
// share is spread over all the others, not handed to its neighbour). It
// returns -1 when no replica is usable: the read goes to the master.
func pickReplica(usable []bool, start uint64) int {
	n := 0
	for _, u := range usable {
		if u {
			n++
		}
	}
	if n == 0 {
		return -1
	}
	k := int(start % uint64(n))
	for i, u := range usable {
		if u {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}

// role is what ROLE answers about a node's replication.
type role struct {
	master bool
	// offset is a master's replication offset, or the offset a replica
	// has applied.
	offset int64
	// connected: a replica's link to its master is up (always true for a
	// master).
	connected bool
}

// parseRole decodes a ROLE reply as go-redis returns it: ["master",
// offset, [[ip, port, offset]...]] or ["slave", ip, port, state, offset].
// A replica that is not connected, or any other role (a Sentinel), is
// reported as such, never guessed.
func parseRole(v []any) (role, error) {
	if len(v) == 0 {
		return role{}, errors.New("ROLE: empty reply")
	}
	name, _ := v[0].(string)
	switch name {
	case "master":
		if len(v) < 2 {
			return role{}, errors.New("ROLE: short master reply")
		}
		off, ok := v[1].(int64)
		if !ok {
			return role{}, errors.New("ROLE: master offset is not an integer")
		}
		return role{master: true, offset: off, connected: true}, nil
	case "slave":
		if len(v) < 5 {
			return role{}, errors.New("ROLE: short replica reply")
		}
		state, _ := v[3].(string)
		off, ok := v[4].(int64)
		if !ok {
			return role{}, errors.New("ROLE: replica offset is not an integer")
		}
		return role{offset: off, connected: state == "connected"}, nil
	}
	return role{}, fmt.Errorf("ROLE: role %q is neither master nor replica", name)
}
