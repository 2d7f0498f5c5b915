package sidecarlink

// The counts datagram. Version 6 layout (all integers are unsigned LEB128
// varints, "uv"):
//
//	magic    2 bytes  'H' 'S'
//	version  1 byte   6 (1 to 5 are still read: their entries have no
//	                  reads among the move outcomes, 1 to 4 no move
//	                  outcomes, 1 to 3 no refusals, 1's and 2's
//	                  no families, 1's no size)
//	flags    1 byte   0 (reserved; a batch with any flag set is rejected)
//	policy   uv length, then that many bytes: "<namespace>/<name>"
//	count    uv number of entries, 1..MaxEntries (Encoder always writes it
//	         as a 2-byte varint so it can be patched in place; Decoder
//	         accepts any varint form)
//	entries  count times:
//	           key     uv length (1..MaxKeyLen), then the key bytes
//	           reads   uv (≤ 2^32-1)
//	           writes  uv (≤ 2^32-1)
//	           bytes   uv (≤ 2^32-1) value bytes read and written
//	           size    uv (≤ 2^32-1) the largest value bytes of one access
//	                   in the interval (version 2 on): what the agent
//	                   ranks big keys by
//	           families uv (≤ 2^32-1) the routing.Families of the commands
//	                   the key's clients sent in the interval (version 3):
//	                   what the manager chooses the key's moves by
//	           refused uv (≤ 2^32-1) the key's commands the sidecar refused
//	                   in the interval because of the key's move (version
//	                   4; not those shed, not Redis' own errors): what the
//	                   manager rolls a move back by
//	           served  uv (≤ 2^32-1) the key's commands its move served
//	                   in the interval (version 5)
//	           if served > 0 (version 5):
//	           failed  uv (≤ served) those of them that failed on the
//	                   move's path (engine.Failure)
//	           baseline total uv (≤ 2^32-1), baseline failed uv (≤ total):
//	                   the commands the sender sent raw in the interval,
//	                   and those that failed by the same test: what the
//	                   manager compares the move's failures with
//	           if served > 0 (version 6):
//	           read served uv (≤ served), read failed uv (≤ read served
//	                   and ≤ failed): the reads among them (commands
//	                   that write nothing); base reads uv (≤ baseline
//	                   total), base reads failed uv (≤ base reads and ≤
//	                   baseline failed): the reads among the raw ones.
//	                   The manager judges reads and the other commands
//	                   apart too: a split counter's reads all fail while
//	                   a shard's node is down, its increments go to the
//	                   places still up, and summed together the reads'
//	                   failures were a tenth of the key's commands
//
// Nothing may follow the last entry. A batch is accepted whole or rejected
// whole: the agent validates it completely before it counts anything.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

const (
	// CountsVersion is the counts datagram version this package writes.
	// It reads it and versions 1 to 5 (entries without reads among the
	// move outcomes, 1 to 4 without move outcomes, 1 to 3 without
	// refusals, 1's and 2's without families, 1's without a size), so
	// agents accept batches of sidecars not yet upgraded.
	CountsVersion = 6
	// UnannouncedCountsVersion is the newest counts version an agent that
	// does not announce one (CountsVersionHeader) reads: agents released
	// before the header read versions 1 to 3. A sidecar writes it to such
	// an agent, which rejects a whole batch of a version it does not know
	// (docs/install.md, Version skew policy).
	UnannouncedCountsVersion = 3
	// CountsVersionHeader is the header of the agent's answer to a routing
	// request that names the newest counts version the agent reads, so a
	// sidecar of a later release than its agent writes what the agent
	// reads (AgentCountsVersion).
	CountsVersionHeader = "Heatsink-Counts-Version"
	// FlushInterval is how often a sidecar sends what it aggregated. The
	// agent relies on it: a key's first batch carries one interval of
	// traffic, and one interval is the shortest span it measures a rate
	// over.
	FlushInterval = 100 * time.Millisecond
	// MaxDatagram is the largest batch the agent reads; a larger one is
	// truncated by the kernel and rejected as oversized.
	MaxDatagram = 65507
	// MinDatagram is the smallest datagram limit a sender may use: one entry
	// with the longest key under the longest policy.
	MinDatagram = headerLen + 3 + MaxPolicyLen + 2 + binary.MaxVarintLen16 + MaxKeyLen + 14*binary.MaxVarintLen32
	// MaxKeyLen is the longest key a batch may carry. Longer keys are not
	// counted by the sidecar: reports carry keys of at most 512 bytes.
	MaxKeyLen = 512
	// MaxPolicyLen bounds "<namespace>/<name>" (63 + 1 + 253).
	MaxPolicyLen = 317
	// MaxEntries bounds the entries of one batch.
	MaxEntries = 8192

	headerLen = 4
)

var magic = [2]byte{'H', 'S'}

// Errors a batch is rejected with. Reasons are stable strings used as metric
// label values (never the batch content).
var (
	ErrTruncated = errors.New("truncated")
	ErrMagic     = errors.New("bad_magic")
	ErrVersion   = errors.New("unknown_version")
	ErrFlags     = errors.New("unknown_flags")
	ErrOversized = errors.New("oversized")
	ErrMalformed = errors.New("malformed")
)

// Reason maps a decode error to its metric label value.
func Reason(err error) string {
	for _, e := range []error{ErrTruncated, ErrMagic, ErrVersion, ErrFlags, ErrOversized, ErrMalformed} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

// Entry is one key's counts in a batch.
type Entry struct {
	// Key aliases the decoded datagram; copy it to keep it.
	Key    []byte
	Reads  uint32
	Writes uint32
	Bytes  uint32
	// Size is the largest value, in bytes, one access of the key read or
	// wrote in the interval (a read's reply, a write's request); 0 in a
	// version 1 batch.
	Size uint32
	// Families are the families of the commands the key's clients sent in
	// the interval; routing.FamUnknown in a batch of version 1 or 2, whose
	// sender knew nothing of families. 0 says no command was seen: a
	// sender that counts commands must report their families too
	// (dataplane/counts.Client.ObserveFamilies), or the manager may choose
	// a move that refuses them.
	Families routing.Families
	// Refused counts the key's commands the sender refused in the interval
	// because of the key's move (a command its move cannot serve; not a
	// shed one, not Redis' own error); 0 in a batch of version 1 to 3.
	Refused uint32
	// Moved are the outcomes of the key's commands its move served in the
	// interval, with the sender's baseline; zero in a batch of version 1
	// to 4.
	Moved MoveCounts
}

// MoveCounts are the outcomes of one key's commands served by its move in
// an interval, and the baseline they are judged against: the same
// sender's commands sent raw in that interval. The manager withdraws a
// move whose path fails clearly more than the baseline.
type MoveCounts struct {
	// Served counts the key's commands the move served, Failed those of
	// them that failed on its path (an i/o error, a timeout, a place
	// LOADING...; not Redis' own semantic errors).
	Served, Failed uint32
	// BaseTotal counts the sender's commands sent raw in the interval,
	// BaseFailed those of them that failed by the same test.
	BaseTotal, BaseFailed uint32
	// ReadServed and ReadFailed are the reads among Served and Failed
	// (commands that write nothing), BaseReads and BaseReadsFailed among
	// BaseTotal and BaseFailed (version 6; zero before).
	ReadServed, ReadFailed, BaseReads, BaseReadsFailed uint32
}

// Batch is a decoded batch. Its slices alias the datagram and are reused by
// the next Decode.
type Batch struct {
	Policy  []byte
	Entries []Entry
}

// Decoder decodes batches without allocating once warm.
type Decoder struct {
	b Batch
}

// Decode validates and decodes one datagram. The result is valid until the
// next call. It never panics, whatever buf holds.
func (d *Decoder) Decode(buf []byte) (*Batch, error) {
	if len(buf) > MaxDatagram {
		return nil, fmt.Errorf("%w: %d bytes", ErrOversized, len(buf))
	}
	if len(buf) < headerLen {
		return nil, fmt.Errorf("%w: %d-byte header", ErrTruncated, len(buf))
	}
	if buf[0] != magic[0] || buf[1] != magic[1] {
		return nil, ErrMagic
	}
	version := buf[2]
	if version < 1 || version > CountsVersion {
		return nil, fmt.Errorf("%w: %d", ErrVersion, buf[2])
	}
	if buf[3] != 0 {
		return nil, fmt.Errorf("%w: %#x", ErrFlags, buf[3])
	}
	p := buf[headerLen:]
	policy, p, err := bytesField(p, MaxPolicyLen, "policy")
	if err != nil {
		return nil, err
	}
	n, p, err := uvarint(p, MaxEntries, "count")
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrMalformed)
	}
	// Each entry takes at least 4 bytes; refuse impossible counts before
	// growing the slice, so a tiny datagram cannot make us allocate.
	if n > uint64(len(p))/4 {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrTruncated, n, len(p))
	}
	d.b.Policy = policy
	es := d.b.Entries[:0]
	for i := uint64(0); i < n; i++ {
		var e Entry
		if e.Key, p, err = bytesField(p, MaxKeyLen, "key"); err != nil {
			return nil, err
		}
		var v uint64
		if v, p, err = uvarint(p, math.MaxUint32, "reads"); err != nil {
			return nil, err
		}
		e.Reads = uint32(v)
		if v, p, err = uvarint(p, math.MaxUint32, "writes"); err != nil {
			return nil, err
		}
		e.Writes = uint32(v)
		if v, p, err = uvarint(p, math.MaxUint32, "bytes"); err != nil {
			return nil, err
		}
		e.Bytes = uint32(v)
		if version >= 2 {
			if v, p, err = uvarint(p, math.MaxUint32, "size"); err != nil {
				return nil, err
			}
			e.Size = uint32(v)
		}
		e.Families = routing.FamUnknown
		if version >= 3 {
			if v, p, err = uvarint(p, math.MaxUint32, "families"); err != nil {
				return nil, err
			}
			e.Families = routing.Families(v)
		}
		if version >= 4 {
			if v, p, err = uvarint(p, math.MaxUint32, "refused"); err != nil {
				return nil, err
			}
			e.Refused = uint32(v)
		}
		if version >= 5 {
			if e.Moved, p, err = moveCounts(p, version >= 6); err != nil {
				return nil, err
			}
		}
		es = append(es, e)
	}
	d.b.Entries = es
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(p))
	}
	if len(policy) == 0 {
		return nil, fmt.Errorf("%w: empty policy", ErrMalformed)
	}
	return &d.b, nil
}

// moveCounts decodes an entry's move outcomes (version 5): served, then,
// when it is not 0, failed (≤ served) and the baseline's total and failed
// (≤ total), and with reads (version 6) the reads among each.
func moveCounts(p []byte, reads bool) (m MoveCounts, rest []byte, err error) {
	var v uint64
	if v, p, err = uvarint(p, math.MaxUint32, "served"); err != nil || v == 0 {
		return m, p, err
	}
	m.Served = uint32(v)
	if v, p, err = uvarint(p, uint64(m.Served), "failed"); err != nil {
		return m, p, err
	}
	m.Failed = uint32(v)
	if v, p, err = uvarint(p, math.MaxUint32, "baseline total"); err != nil {
		return m, p, err
	}
	m.BaseTotal = uint32(v)
	if v, p, err = uvarint(p, uint64(m.BaseTotal), "baseline failed"); err != nil {
		return m, p, err
	}
	m.BaseFailed = uint32(v)
	if !reads {
		return m, p, nil
	}
	if v, p, err = uvarint(p, uint64(m.Served), "read served"); err != nil {
		return m, p, err
	}
	m.ReadServed = uint32(v)
	if v, p, err = uvarint(p, uint64(min(m.ReadServed, m.Failed)), "read failed"); err != nil {
		return m, p, err
	}
	m.ReadFailed = uint32(v)
	if v, p, err = uvarint(p, uint64(m.BaseTotal), "base reads"); err != nil {
		return m, p, err
	}
	m.BaseReads = uint32(v)
	if v, p, err = uvarint(p, uint64(min(m.BaseReads, m.BaseFailed)), "base reads failed"); err != nil {
		return m, p, err
	}
	m.BaseReadsFailed = uint32(v)
	return m, p, nil
}

func uvarint(p []byte, max uint64, what string) (uint64, []byte, error) {
	v, n := binary.Uvarint(p)
	switch {
	case n == 0:
		return 0, nil, fmt.Errorf("%w: %s", ErrTruncated, what)
	case n < 0:
		return 0, nil, fmt.Errorf("%w: %s varint overflows", ErrMalformed, what)
	case v > max:
		return 0, nil, fmt.Errorf("%w: %s %d exceeds %d", ErrMalformed, what, v, max)
	}
	return v, p[n:], nil
}

func bytesField(p []byte, max uint64, what string) ([]byte, []byte, error) {
	l, p, err := uvarint(p, max, what)
	if err != nil {
		return nil, nil, err
	}
	if uint64(len(p)) < l {
		return nil, nil, fmt.Errorf("%w: %s", ErrTruncated, what)
	}
	if l == 0 && what == "key" {
		return nil, nil, fmt.Errorf("%w: empty key", ErrMalformed)
	}
	return p[:l], p[l:], nil
}

// AgentCountsVersion is the counts version to write to the agent whose
// routing answer carried header h: the version it announces, at most
// CountsVersion, or UnannouncedCountsVersion when it announces none (an
// agent of an earlier release) or one below that (none exists).
func AgentCountsVersion(h http.Header) int {
	v, err := strconv.Atoi(h.Get(CountsVersionHeader))
	if err != nil || v < UnannouncedCountsVersion {
		return UnannouncedCountsVersion
	}
	return min(v, CountsVersion)
}

// Encoder appends batches of one policy to a buffer, starting a new batch
// whenever the next entry would make the datagram exceed its size limit.
type Encoder struct {
	limit  int
	policy string
	// version is the version written (SetVersion); 0 is CountsVersion.
	version byte
	buf     []byte
	count   int
	// countAt is where the count varint starts; entries follow after a
	// fixed reservation so the count can be patched in place.
	countAt int
}

// EntrySize is an upper bound of the bytes key takes in a batch.
func EntrySize(key string) int { return binary.MaxVarintLen16 + len(key) + 14*binary.MaxVarintLen32 }

// SetVersion makes the next batches (from Reset on) of version v, for an
// agent that reads no later one (AgentCountsVersion): from
// UnannouncedCountsVersion to CountsVersion, v is clamped into that range.
// A version 3 batch carries no refusals, a version 4 one no move
// outcomes, a version 5 one no reads among them.
func (e *Encoder) SetVersion(v int) {
	e.version = byte(min(max(v, UnannouncedCountsVersion), CountsVersion))
}

// Reset starts a batch for policy in buf (reusing its storage), with datagrams
// limited to limit bytes.
func (e *Encoder) Reset(buf []byte, policy string, limit int) {
	e.limit, e.policy = limit, policy
	if e.version == 0 {
		e.version = CountsVersion
	}
	e.buf = buf[:0]
	e.buf = append(e.buf, magic[0], magic[1], e.version, 0)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(policy)))
	e.buf = append(e.buf, policy...)
	e.countAt = len(e.buf)
	e.buf = append(e.buf, 0x80, 0x00) // count placeholder: 2-byte varint of 0
	e.count = 0
}

// Restart starts the next batch of the same policy in the same storage
// (after Bytes was sent).
func (e *Encoder) Restart() { e.Reset(e.buf, e.policy, e.limit) }

// Policy is the policy of the current batch.
func (e *Encoder) Policy() string { return e.policy }

// Fits reports whether any entry for key fits in the current batch.
func (e *Encoder) Fits(key string) bool {
	return e.count < MaxEntries && len(e.buf)+EntrySize(key) <= e.limit
}

// TryAdd appends an entry if it fits in the current batch, by its exact
// size rather than Fits' bound (so a flush of many keys takes as few
// datagrams as their bytes need), and reports whether it did; when it
// does not, the batch is left as it was.
func (e *Encoder) TryAdd(key string, reads, writes, bytes, size uint32, fam routing.Families, refused uint32, moved MoveCounts) bool {
	if e.count >= MaxEntries {
		return false
	}
	n := len(e.buf)
	e.Add(key, reads, writes, bytes, size, fam, refused, moved)
	if len(e.buf) > e.limit {
		e.buf = e.buf[:n]
		e.count--
		return false
	}
	return true
}

// Len is the number of entries in the current batch.
func (e *Encoder) Len() int { return e.count }

// Add appends an entry. The caller checks Fits first.
func (e *Encoder) Add(key string, reads, writes, bytes, size uint32, fam routing.Families, refused uint32, moved MoveCounts) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(key)))
	e.buf = append(e.buf, key...)
	e.buf = binary.AppendUvarint(e.buf, uint64(reads))
	e.buf = binary.AppendUvarint(e.buf, uint64(writes))
	e.buf = binary.AppendUvarint(e.buf, uint64(bytes))
	e.buf = binary.AppendUvarint(e.buf, uint64(size))
	e.buf = binary.AppendUvarint(e.buf, uint64(fam))
	if e.version >= 4 {
		e.buf = binary.AppendUvarint(e.buf, uint64(refused))
	}
	if e.version >= 5 {
		e.buf = binary.AppendUvarint(e.buf, uint64(moved.Served))
		if moved.Served > 0 {
			e.buf = binary.AppendUvarint(e.buf, uint64(min(moved.Failed, moved.Served)))
			e.buf = binary.AppendUvarint(e.buf, uint64(moved.BaseTotal))
			e.buf = binary.AppendUvarint(e.buf, uint64(min(moved.BaseFailed, moved.BaseTotal)))
			if e.version >= 6 {
				rs := min(moved.ReadServed, moved.Served)
				e.buf = binary.AppendUvarint(e.buf, uint64(rs))
				e.buf = binary.AppendUvarint(e.buf, uint64(min(moved.ReadFailed, rs, moved.Failed)))
				br := min(moved.BaseReads, moved.BaseTotal)
				e.buf = binary.AppendUvarint(e.buf, uint64(br))
				e.buf = binary.AppendUvarint(e.buf, uint64(min(moved.BaseReadsFailed, br, moved.BaseFailed)))
			}
		}
	}
	e.count++
}

// Bytes finishes the batch and returns the datagram. It aliases the buffer
// given to Reset.
func (e *Encoder) Bytes() []byte {
	// A 2-byte varint: low 7 bits with the continuation bit, then the rest.
	e.buf[e.countAt] = byte(e.count&0x7f) | 0x80
	e.buf[e.countAt+1] = byte(e.count >> 7)
	return e.buf
}

// AppendBatch encodes one whole batch; for tests, fuzz seeds and tools.
func AppendBatch(buf []byte, policy string, entries []Entry) []byte {
	var e Encoder
	e.Reset(buf, policy, math.MaxInt)
	for _, en := range entries {
		e.Add(string(en.Key), en.Reads, en.Writes, en.Bytes, en.Size, en.Families, en.Refused, en.Moved)
	}
	return e.Bytes()
}
