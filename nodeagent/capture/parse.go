package capture

import (
	"bytes"

	"github.com/heatsink-dev/heatsink/routing/command"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// parser reads the client→server half of one TCP connection, fed in
// arbitrary pieces (whatever the packets carried), and reports each
// command's name, the few arguments that locate its key, and its size on
// the wire.
//
// Why not the proxy's resp.Reader: that reader holds a whole frame in one
// buffer (up to Redis' 512 MiB bulk) and pulls from an io.Reader. A capture
// must hold almost nothing per connection (a node has thousands), must never
// keep a value, and must pick a stream up anywhere: after a lost packet, or
// on a connection opened before the agent started. So this is a streaming
// state machine over the same grammar (the multibulk form every client
// library sends; Redis' rules on counts and lengths), keeping at most the
// arguments up to a command's first key and skipping every other byte
// without copying it.
//
// Not synchronised (a gap, garbage, a stream joined midway), it looks for
// the next command boundary: a line "*<count>" after a line end (or at the
// gap), followed by "$<len>" and a command name the table knows. Bytes that
// fail that test are skipped.
type parser struct {
	synced bool
	st     pstate
	// line holds a header line ("*3", "$5") being read; lineN is its length.
	line  [lineMax]byte
	lineN int
	// argc is the command's argument count, argi the index of the argument
	// being read, bulk the bytes of it still to come.
	argc, argi, bulk int
	// frame is the command's size on the wire so far.
	frame int
	// keep: arguments with an index below it are kept (arg 0, the name,
	// always; the rest once the name says where the key is).
	keep int
	// args are the kept arguments, slices of buf; long marks one too long
	// to keep (nil in args).
	args [][]byte
	buf  []byte
	// bufCap bounds buf (the per-connection buffer).
	bufCap int
	// rs holds the bytes of a candidate boundary while it is being tested;
	// afterNL: the byte before the next one is a line end (or a gap).
	rs      []byte
	afterNL bool

	// info is the command table's entry of the command being read (known:
	// it has one), looked up once its name is read.
	info  command.Info
	known bool
	// last is the last name looked up and what the table said: a
	// connection mostly repeats a few commands, and comparing a name is
	// cheaper than hashing it.
	last struct {
		name  [24]byte
		n     int
		info  command.Info
		known bool
		// keep is keepFor's answer (-1: it depends on the count).
		keep int
	}

	emit func(p *parser)
	// garbage counts bytes skipped looking for a boundary, resyncs the
	// boundaries found.
	garbage, resyncs uint64
}

type pstate uint8

const (
	stArray    pstate = iota // reading "*<count>\r\n"
	stBulkHdr                // reading "$<len>\r\n"
	stBulk                   // reading an argument's bytes
	stBulkEnd                // reading the CRLF after them
	stBulkEnd2               // the LF
)

const (
	// lineMax is the longest header line accepted: "*" or "$" and a count
	// of at most 10 digits, plus CR.
	lineMax = 16
	// maxArgs and maxBulk are Redis' own limits (1,048,576 arguments is
	// ours, far above any real command; a bulk is at most 512 MiB).
	maxArgs = 1 << 20
	maxBulk = 512 << 20
	// movableKeep is how many arguments are kept of a command whose key's
	// place depends on its arguments (EVAL, XREAD, ...).
	movableKeep = 32
	// resyncMax is the longest candidate boundary tested: "*" + 7 digits,
	// CRLF, "$" + 2 digits, CRLF, a name of at most 24 bytes, CRLF.
	resyncMax = 48
	// DefaultFlowBuffer bounds the arguments kept of one command.
	DefaultFlowBuffer = 2 * sidecarlink.MaxKeyLen
)

func newParser(bufCap int, emit func(*parser)) *parser {
	return &parser{bufCap: bufCap, emit: emit}
}

// gap says bytes were lost before the next ones: the command in progress
// is dropped and the stream is searched for a boundary, which may start
// right at the next byte.
func (p *parser) gap() {
	p.synced, p.afterNL, p.rs = false, true, p.rs[:0]
}

// startSynced says the next byte starts a command (the connection's first
// byte: its SYN was seen).
func (p *parser) startSynced() {
	p.synced = true
	p.reset()
}

func (p *parser) reset() {
	p.st, p.lineN, p.argc, p.argi, p.bulk, p.frame, p.keep = stArray, 0, 0, 0, 0, 0, 1
	p.info, p.known = command.Info{}, false
	p.args, p.buf = p.args[:0], p.buf[:0]
}

// feed parses b. It never keeps b.
func (p *parser) feed(b []byte) {
	for len(b) > 0 {
		if !p.synced {
			b = p.seek(b)
			continue
		}
		n, ok := p.step(b)
		if !ok {
			// Garbage: drop the command in progress, look for the next
			// boundary after the offending byte.
			p.garbage++
			p.synced, p.afterNL, p.rs = false, false, p.rs[:0]
			b = b[n:]
			continue
		}
		b = b[n:]
	}
}

// step consumes a prefix of b in synced mode; ok false means b[n-1] broke
// the grammar.
func (p *parser) step(b []byte) (n int, ok bool) {
	switch p.st {
	case stArray, stBulkHdr:
		// A header line: up to its LF, the bytes checked as the byte-wise
		// grammar would (first byte, length, CR before LF).
		// Lines are short (lineMax): a plain scan beats IndexByte's call.
		end := -1
		for j, c := range b[:min(len(b), lineMax+1)] {
			if c == '\n' {
				end = j
				break
			}
		}
		chunk := b
		if end >= 0 {
			chunk = b[:end]
		}
		if p.lineN == 0 && len(chunk) > 0 {
			want := byte('*')
			if p.st == stBulkHdr {
				want = '$'
			}
			if chunk[0] != want {
				return 1, false
			}
		}
		if room := len(p.line) - p.lineN; len(chunk) > room {
			return room + 1, false
		}
		if p.lineN == 0 && end >= 0 {
			// The whole line is in b (the common case): read it there.
			if len(chunk) == 0 || chunk[len(chunk)-1] != '\r' {
				return end + 1, false
			}
			p.frame += len(chunk) + 1
			return end + 1, p.header(chunk[:len(chunk)-1])
		}
		p.lineN += copy(p.line[p.lineN:], chunk)
		if end < 0 {
			return len(b), true
		}
		if p.lineN == 0 || p.line[p.lineN-1] != '\r' {
			return end + 1, false
		}
		p.frame += p.lineN + 1
		return end + 1, p.header(p.line[:p.lineN-1])
	case stBulk:
		n = min(p.bulk, len(b))
		if p.argi < len(p.args) && p.args[p.argi] != nil {
			p.buf = append(p.buf, b[:n]...)
		}
		p.bulk -= n
		p.frame += n
		if p.bulk == 0 {
			p.st = stBulkEnd
			if len(b) >= n+2 && b[n] == '\r' && b[n+1] == '\n' {
				// Its CRLF is in b too (the common case): as stBulkEnd
				// and stBulkEnd2 would read it.
				p.frame += 2
				p.argDone()
				return n + 2, true
			}
		}
		return n, true
	case stBulkEnd:
		p.frame++
		if b[0] != '\r' {
			return 1, false
		}
		p.st = stBulkEnd2
		return 1, true
	case stBulkEnd2:
		p.frame++
		if b[0] != '\n' {
			return 1, false
		}
		p.argDone()
		return 1, true
	}
	return len(b), false
}

// header handles a complete header line (without CRLF).
func (p *parser) header(l []byte) bool {
	p.lineN = 0
	v, ok := atoi(l[1:])
	if !ok {
		return false
	}
	if p.st == stArray {
		switch {
		case v > maxArgs:
			return false
		case v <= 0: // Redis ignores "*0" and "*-1" from clients
			p.reset()
			return true
		}
		p.argc, p.st = v, stBulkHdr
		return true
	}
	if v < 0 || v > maxBulk {
		return false
	}
	p.bulk = v
	// Keep the argument if its index is kept and it fits: a key longer
	// than a batch may carry is not counted anyway.
	if p.argi < p.keep {
		// nil marks an argument too long to keep (never a key we count).
		var arg []byte
		if v <= sidecarlink.MaxKeyLen && len(p.buf)+v <= p.bufCap {
			if p.buf == nil {
				p.buf = make([]byte, 0, min(p.bufCap, 256))
			}
			arg = p.buf[len(p.buf):len(p.buf)]
		}
		p.args = append(p.args, arg)
	}
	p.st = stBulk
	if v == 0 {
		p.st = stBulkEnd
	}
	return true
}

// argDone closes the argument just read; after the last, the command.
func (p *parser) argDone() {
	i := p.argi
	if i < len(p.args) && p.args[i] != nil {
		start := len(p.buf) - p.argLen(i)
		p.args[i] = p.buf[start:len(p.buf):len(p.buf)]
	}
	if i == 0 {
		var name []byte
		if len(p.args) > 0 {
			name = p.args[0]
		}
		p.info, p.known, p.keep = p.lookup(name, p.argc)
	}
	p.argi++
	p.st = stBulkHdr
	if p.argi == p.argc {
		p.emit(p)
		p.reset()
	}
}

// lookup is command.Lookup and keepFor, remembering the last name.
func (p *parser) lookup(name []byte, argc int) (command.Info, bool, int) {
	l := &p.last
	if l.n > 0 && bytes.Equal(l.name[:l.n], name) {
		if l.keep < 0 {
			return l.info, l.known, keepFor(l.info, l.known, name, argc)
		}
		return l.info, l.known, l.keep
	}
	info, known := command.Lookup(name)
	keep := keepFor(info, known, name, argc)
	if len(name) <= len(l.name) {
		l.n = copy(l.name[:], name)
		l.info, l.known, l.keep = info, known, keep
		if known && info.Kind != command.State && info.FirstIndex() < 0 {
			l.keep = -1 // a movable key: as many as the count allows
		}
	}
	return info, known, keep
}

// argLen is the length of kept argument i: what was appended since the
// arguments before it (they are appended one after the other).
func (p *parser) argLen(i int) int {
	off := 0
	for j := range i {
		off += len(p.args[j])
	}
	return len(p.buf) - off
}

// keepFor says how many leading arguments of a command named name locate
// its first key. AUTH and HELLO (passwords) and every command the table
// does not know keep their name only (CLIENT its subcommand too): their
// arguments are skipped unread.
func keepFor(info command.Info, known bool, name []byte, argc int) int {
	switch {
	case !known && command.EqFold(name, "CLIENT"):
		// Its subcommand (a keyword): CLIENT REPLY OFF|SKIP stops the
		// replies that reply capture pairs with commands.
		return 2
	case name == nil || !known:
		return 1
	case info.Kind == command.State:
		if command.EqFold(name, "SELECT") {
			return 2
		}
		return 1
	case info.FirstIndex() == 0:
		return 1
	case info.FirstIndex() > 0:
		return info.FirstIndex() + 1
	}
	return min(argc, movableKeep)
}

// seek looks for a command boundary in b (unsynced) and returns what is
// left of b after what it consumed; once a boundary is confirmed the
// parser is synced and fed the candidate's bytes.
func (p *parser) seek(b []byte) []byte {
	for len(b) > 0 {
		if len(p.rs) == 0 {
			// Find a '*' right after a line end.
			i := 0
			for ; i < len(b); i++ {
				if b[i] == '*' && p.afterNL {
					break
				}
				p.afterNL = b[i] == '\n'
				p.garbage++
			}
			b = b[i:]
			if len(b) == 0 {
				return b
			}
		}
		take := min(resyncMax-len(p.rs), len(b))
		p.rs = append(p.rs, b[:take]...)
		b = b[take:]
		switch boundary(p.rs) {
		case bMore:
			if len(b) == 0 {
				return b
			}
		case bYes:
			cand := p.rs
			p.rs = p.rs[:0:0] // cand keeps the array; feed must not reuse it
			p.synced = true
			p.resyncs++
			p.reset()
			p.feed(cand)
			if len(p.rs) == 0 {
				p.rs = cand[:0]
			}
			return b
		case bNo:
			// Not a boundary: scan on from the candidate's second byte
			// (a copy: p.rs is reused), then on with b.
			rest := append([]byte(nil), p.rs[1:]...)
			p.garbage++
			p.rs = p.rs[:0]
			p.afterNL = false
			p.feed(rest)
			return b
		}
	}
	return b
}

type bverdict uint8

const (
	bMore bverdict = iota
	bYes
	bNo
)

// boundary tests whether b starts a command: "*<1..7 digits>\r\n$<1..2
// digits>\r\n<name>\r\n" with a name the command table knows.
func boundary(b []byte) bverdict {
	i := 1 // b[0] == '*'
	num := func(maxDigits int) (int, bverdict) {
		start, v := i, 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + int(b[i]-'0')
			i++
			if i-start > maxDigits {
				return 0, bNo
			}
		}
		if i == len(b) {
			return 0, bMore
		}
		if i == start {
			return 0, bNo
		}
		return v, bYes
	}
	crlf := func() bverdict {
		for _, c := range []byte{'\r', '\n'} {
			if i == len(b) {
				return bMore
			}
			if b[i] != c {
				return bNo
			}
			i++
		}
		return bYes
	}
	n, v := num(7)
	if v != bYes {
		return v
	}
	if n < 1 || n > maxArgs {
		return bNo
	}
	if v := crlf(); v != bYes {
		return v
	}
	if i == len(b) {
		return bMore
	}
	if b[i] != '$' {
		return bNo
	}
	i++
	l, v := num(2)
	if v != bYes {
		return v
	}
	if l < 1 || l > 24 {
		return bNo
	}
	if v := crlf(); v != bYes {
		return v
	}
	if len(b) < i+l+2 {
		return bMore
	}
	if _, known := command.Lookup(b[i : i+l]); !known {
		return bNo
	}
	i += l
	return crlf()
}

// atoi parses a decimal integer with an optional '-' (no '+', no spaces),
// as Redis' string2ll for the counts it reads.
func atoi(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}
