package proxy

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Node-wide commands in cluster mode. A client of one Redis expects KEYS,
// SCAN, DBSIZE, RANDOMKEY, FLUSHALL, FLUSHDB and INFO keyspace to act on
// the whole keyspace (test harnesses run FLUSHDB before every test); in a
// cluster the keyspace is split over the masters, so the proxy asks every
// master, on the session's own connections, and answers what one Redis
// holding all the keys would.

// nodeWide reports a command served by asking every master (opNodeWide).
// SWAPDB is not one: Redis Cluster has database 0 only.
func nodeWide(args [][]byte) bool {
	if len(args) == 0 {
		return false
	}
	switch n := args[0]; {
	case command.EqFold(n, "KEYS"), command.EqFold(n, "SCAN"), command.EqFold(n, "DBSIZE"),
		command.EqFold(n, "RANDOMKEY"), command.EqFold(n, "FLUSHALL"), command.EqFold(n, "FLUSHDB"):
		return true
	case command.EqFold(n, "INFO"):
		return len(args) == 2 && command.EqFold(args[1], "KEYSPACE")
	}
	return false
}

// nodeWideCmd is the session's answer to a node-wide command (opNodeWide):
// the command as the client sent it (FLUSHALL ASYNC, KEYS pattern, ...)
// to every master, one reply merged from theirs. SCAN carries its node in
// its cursor (scan).
func (s *session) nodeWideCmd() {
	args := s.cmd.Args
	if command.EqFold(args[0], "SCAN") {
		s.scan()
		return
	}
	out := mergeNodeWide(args[0], s.toEveryMaster(), s.proto)
	s.local(func(b []byte) []byte { return append(b, out...) })
}

// mergeNodeWide is the one reply for a node-wide command from the replies
// of every master: the first error if any master refused (a syntax error
// is the same on every node; a failure on one node is not hidden), else
// DBSIZE's sum, KEYS' keys of every node, one of the keys RANDOMKEY found
// (nil only when every node is empty), INFO keyspace's counts summed, and
// for FLUSHALL and FLUSHDB the common OK.
func mergeNodeWide(name []byte, replies [][]byte, proto int) []byte {
	if len(replies) == 0 {
		return resp.AppendError(nil, errNoMaster)
	}
	for _, r := range replies {
		if len(r) > 0 && (r[0] == '-' || r[0] == '!') {
			return r
		}
	}
	switch {
	case command.EqFold(name, "DBSIZE"):
		var n int64
		for _, r := range replies {
			v, _, err := resp.Decode(r, resp.ReplyLimits())
			i, ok := v.(int64)
			if err != nil || !ok {
				return resp.AppendError(nil, errUnreadable)
			}
			n += i
		}
		return resp.AppendInt(nil, n)
	case command.EqFold(name, "KEYS"):
		var all [][]any
		total := 0
		for _, r := range replies {
			v, _, err := resp.Decode(r, resp.ReplyLimits())
			arr, ok := v.([]any)
			if err != nil || !ok {
				return resp.AppendError(nil, errUnreadable)
			}
			all = append(all, arr)
			total += len(arr)
		}
		out := resp.AppendArrayHeader(nil, total)
		for _, arr := range all {
			out = appendKeys(out, arr)
		}
		return out
	case command.EqFold(name, "RANDOMKEY"):
		var found [][]byte
		for _, r := range replies {
			if v, _, err := resp.Decode(r, resp.ReplyLimits()); err == nil && v != nil {
				found = append(found, r)
			}
		}
		if len(found) == 0 {
			return resp.AppendNull(nil, proto)
		}
		// Redis' own RANDOMKEY is not uniform either; what matters is that
		// the key exists and nil means an empty keyspace.
		return found[rand.IntN(len(found))]
	case command.EqFold(name, "INFO"):
		return mergeKeyspace(replies)
	}
	return replies[0] // FLUSHALL, FLUSHDB: +OK from every node
}

// appendKeys appends the bulk strings of a KEYS or SCAN key list.
func appendKeys(out []byte, keys []any) []byte {
	for _, k := range keys {
		b, _ := k.([]byte)
		out = resp.AppendBulk(out, b)
	}
	return out
}

// mergeKeyspace merges the replies to INFO keyspace: per database, the
// sums of keys, expires (and Redis 7.4's subexpiry), and avg_ttl
// averaged over the nodes weighted by their expires (Redis' avg_ttl is
// itself an estimate over keys with a TTL). The reply keeps the first
// node's type (a bulk string, a RESP3 verbatim string).
func mergeKeyspace(replies [][]byte) []byte {
	text, verbatim, ok := mergeKeyspaceText(replies)
	if !ok {
		return resp.AppendError(nil, errUnreadable)
	}
	return infoFrame(text, verbatim)
}

// infoFrame frames INFO's text as Redis does: a bulk string, or a RESP3
// verbatim string.
func infoFrame(text []byte, verbatim bool) []byte {
	if verbatim {
		out := append([]byte{'='}, strconv.Itoa(len(text)+4)...)
		out = append(out, "\r\ntxt:"...)
		out = append(out, text...)
		return append(out, "\r\n"...)
	}
	return resp.AppendBulk(nil, text)
}

// mergeKeyspaceText is mergeKeyspace's text (# Keyspace and its lines) and
// whether the first reply was a verbatim string; ok is false when a reply
// is not an INFO text.
func mergeKeyspaceText(replies [][]byte) (text []byte, verbatim, ok bool) {
	type db struct {
		fields []string // in the order Redis prints them
		sums   map[string]int64
		ttlSum float64 // avg_ttl * expires, summed
	}
	dbs := map[int]*db{}
	var order []int
	for _, r := range replies {
		v, _, err := resp.Decode(r, resp.ReplyLimits())
		text, ok := v.([]byte)
		if err != nil || !ok {
			return nil, false, false
		}
		if r[0] == '=' {
			verbatim = true
			text = bytes.TrimPrefix(text, []byte("txt:"))
		}
		for _, line := range bytes.Split(text, []byte("\r\n")) {
			name, rest, ok := bytes.Cut(line, []byte(":"))
			if !ok || !bytes.HasPrefix(name, []byte("db")) {
				continue
			}
			n, err := strconv.Atoi(string(name[2:]))
			if err != nil {
				continue
			}
			d := dbs[n]
			if d == nil {
				d = &db{sums: map[string]int64{}}
				dbs[n] = d
				order = append(order, n)
			}
			var expires, ttl int64
			for _, kv := range bytes.Split(rest, []byte(",")) {
				k, val, _ := bytes.Cut(kv, []byte("="))
				i, _ := strconv.ParseInt(string(val), 10, 64)
				key := string(k)
				if _, seen := d.sums[key]; !seen {
					d.fields = append(d.fields, key)
				}
				switch key {
				case "avg_ttl":
					ttl = i
					d.sums[key] = 0
				default:
					if key == "expires" {
						expires = i
					}
					d.sums[key] += i
				}
			}
			d.ttlSum += float64(ttl) * float64(expires)
		}
	}
	slices.Sort(order)
	text = append(text, "# Keyspace\r\n"...)
	for _, n := range order {
		d := dbs[n]
		text = append(text, "db"...)
		text = strconv.AppendInt(text, int64(n), 10)
		text = append(text, ':')
		for i, f := range d.fields {
			if i > 0 {
				text = append(text, ',')
			}
			v := d.sums[f]
			if f == "avg_ttl" && d.sums["expires"] > 0 {
				v = int64(d.ttlSum / float64(d.sums["expires"]))
			}
			text = append(text, f...)
			text = append(text, '=')
			text = strconv.AppendInt(text, v, 10)
		}
		text = append(text, "\r\n"...)
	}
	return text, verbatim, true
}

// infoHasKeyspace reports whether INFO's sections (its arguments) include
// Keyspace: none (the default sections), default, all, everything, or
// keyspace among them.
func infoHasKeyspace(args [][]byte) bool {
	if len(args) == 1 {
		return true
	}
	for _, a := range args[1:] {
		if command.EqFold(a, "DEFAULT") || command.EqFold(a, "ALL") || command.EqFold(a, "EVERYTHING") || command.EqFold(a, "KEYSPACE") {
			return true
		}
	}
	return false
}

// spliceKeyspace is INFO's reply first (the first master's, a bulk or
// verbatim string) with its Keyspace section replaced by the one merged
// from keyspaces (every master's INFO keyspace): the other sections
// describe that one node. Any other reply (an error) is returned as it is.
func spliceKeyspace(first []byte, keyspaces [][]byte) []byte {
	v, _, err := resp.Decode(first, resp.ReplyLimits())
	text, ok := v.([]byte)
	if err != nil || !ok {
		return first
	}
	verbatim := first[0] == '='
	if verbatim {
		text = bytes.TrimPrefix(text, []byte("txt:"))
	}
	for _, r := range keyspaces {
		if len(r) > 0 && (r[0] == '-' || r[0] == '!') {
			return r
		}
	}
	merged, _, ok := mergeKeyspaceText(keyspaces)
	if !ok {
		return resp.AppendError(nil, errUnreadable)
	}
	const head = "# Keyspace\r\n"
	i := bytes.Index(text, []byte(head))
	if i < 0 {
		return first
	}
	end := len(text)
	if j := bytes.Index(text[i+len(head):], []byte("\r\n#")); j >= 0 {
		end = i + len(head) + j
	}
	out := append(append(append([]byte(nil), text[:i]...), merged...), text[end:]...)
	return infoFrame(out, verbatim)
}
