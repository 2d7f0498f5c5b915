package engine

import (
	"strings"
	"unsafe"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// Class is what a key's mitigation changes about where its data lives,
// which decides what a command on the key may do.
type Class uint8

const (
	// ClassNone: the key is not mitigated.
	ClassNone Class = iota
	// ClassCache: coalesced and/or cached. The base key holds the whole
	// value, so any command may go to Redis raw; a write then drops the
	// cached copy.
	ClassCache
	// ClassReplicated: the base key is the truth and replicas are copies.
	// Raw reads are exact; a string write must update the replicas too
	// (the engine does) or be refused.
	ClassReplicated
	// ClassCounter: a split (and maybe pre-aggregated) counter, whose
	// value is the base key plus shards plus pending increments: only
	// what the engine implements is exact.
	ClassCounter
	// ClassMembers: a hash of counters, sorted set or set split by member
	// (Split.Members, Split.Kind): each member lives in its places, so
	// only the commands members.go, zset.go and set.go implement are
	// served; every other command is refused.
	ClassMembers
)

// ClassOf is the class of a table entry. A nil entry (the key left the
// table while the command was being classified) is ClassCache: raw is
// exact and invalidating is harmless.
func ClassOf(en *routing.Entry) Class {
	switch {
	case en == nil:
		return ClassCache
	case en.Split != nil && en.Split.Members:
		return ClassMembers
	case en.Split != nil || en.PreAggregate != nil:
		return ClassCounter
	case en.Replicate != nil:
		return ClassReplicated
	}
	return ClassCache
}

// MitigationName names an entry's mitigation in error replies.
func MitigationName(en *routing.Entry) string {
	switch {
	case en == nil:
		return "local cache"
	case en.PreAggregate != nil:
		return "pre-aggregate"
	case en.Split != nil:
		return "split"
	case en.Replicate != nil:
		return "replicate"
	case en.LocalCache != nil:
		return "local cache"
	}
	return "coalesce"
}

// Op says how a command naming mitigated keys is served.
type Op uint8

const (
	// OpRaw: send the command to Redis as is; if Decision.Write, then
	// drop the cached copies of the mitigated keys it names.
	OpRaw Op = iota
	// OpRefuse: answer Decision.Err without sending anything.
	OpRefuse
	// OpGet: GET or GETEX key (no options): Engine.Get.
	OpGet
	// OpStrlen: STRLEN of a counter: the length of Engine.Get's value.
	OpStrlen
	// OpType: TYPE of a counter: "string" if Engine.Get finds it, else
	// "none".
	OpType
	// OpMGet: MGET: Engine.Get per mitigated key, a raw GET per other key
	// (WRONGTYPE reads as nil, as in MGET), assembled in order.
	OpMGet
	// OpExists: EXISTS naming a counter: Engine.Get per counter key, a raw
	// EXISTS per other key, added up.
	OpExists
	// OpDel: DEL or UNLINK naming a replicated or counter key: Engine.Del
	// per mitigated key, a raw DEL/UNLINK per other key, added up.
	OpDel
	// OpMSet: MSET naming a replicated or counter key: Engine.Set per
	// mitigated pair (after checking that every counter value is an
	// integer, Decision.Err otherwise), a raw SET per other pair.
	OpMSet
	// OpSet: SET, SETNX, SETEX, PSETEX: Engine.Set with SetForm's options
	// (a malformed form goes raw: Redis rejects it and writes nothing).
	OpSet
	// OpIncr: INCR, DECR, INCRBY, DECRBY: Engine.IncrBy (a malformed form
	// goes raw).
	OpIncr
	// OpExpire: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX, GT, LT)
	// and PERSIST of a counter: Engine.Expire, which gives every physical
	// key the base key's resulting expiry.
	OpExpire
	// OpTTL: TTL, PTTL, EXPIRETIME, PEXPIRETIME of a counter: Engine.TTL
	// (the base key's, -1 for a counter held by its shards alone).
	OpTTL
	// OpRead: a cacheable read (command.Info.Cacheable: read-only,
	// deterministic, one key; HGETALL, SISMEMBER, ZRANGE, LRANGE, XRANGE,
	// TYPE, GETRANGE...) of a key whose base key is the whole truth and
	// whose entry coalesces, caches or reads replicas: Engine.Read, by the
	// whole request, in the client's protocol. The go-redis hook sends it
	// raw.
	OpRead
	// OpMembers: a command a member split serves (the hash, sorted-set
	// and set commands of hashOps, zsetOps and setOps): Engine.ServeMembers
	// (a malformed form goes raw to the base key, which Redis rejects).
	OpMembers
)

// Decision is Classify's answer.
type Decision struct {
	Op Op
	// Class is the most constrained class among the command's keys, and
	// Entry that key's entry; ClassNone when no key is mitigated (Op is
	// then OpRaw).
	Class Class
	Entry *routing.Entry
	// Write: the command may write, so a raw send must be followed by
	// invalidating its mitigated keys.
	Write bool
	// Err is the error reply of OpRefuse (and of an OpMSet whose counter
	// value is not an integer).
	Err string
	// Shed is the shed key whose limiter refused the command (Err is then
	// routing.ShedError), "" otherwise.
	Shed string
}

// Classify decides how a command (args[0] is its name, in any case) is
// served given the mitigated keys it names: lookup reports whether the
// engine mitigates a key and its table entry (Engine.Lookup, then
// Table().Lookup); the key it is given aliases args, so it must not keep
// it. inTx is true inside MULTI, where Redis must queue every
// command and the engine's own commands cannot join the transaction.
//
// The rule, shared by the sidecar proxy and the go-redis hook: a command is
// sent raw only where the base key alone is the truth; otherwise it goes
// through the engine where its semantics map exactly, and is refused where
// they do not (docs/proxy.md, compatibility table).
func Classify(args [][]byte, lookup func(key string) (*routing.Entry, bool), inTx bool) Decision {
	if len(args) == 0 {
		return Decision{}
	}
	c, ok := command.Lookup(args[0])
	if !ok {
		return Decision{}
	}
	d := Decision{Write: c.Write}
	c.ForEachKey(args, func(i int) bool {
		en, ok := lookup(unsafeString(args[i]))
		if !ok {
			return true
		}
		if cl := ClassOf(en); cl > d.Class {
			d.Class, d.Entry = cl, en
		}
		return true
	})
	if d.Class == ClassNone {
		return Decision{}
	}
	name := args[0]
	if d.Class == ClassMembers && !inTx {
		return classifyMembers(d, name, args)
	}
	rawOK := d.Class == ClassCache || d.Class == ClassReplicated && (!c.Write || c.Typed)
	refuse := func(where string) Decision {
		d.Op = OpRefuse
		d.Err = "ERR heatsink: " + strings.ToUpper(string(name)) + " on a key mitigated by " + MitigationName(d.Entry) + " is not supported" + where
		return d
	}
	if inTx {
		if rawOK {
			return d
		}
		return refuse(" inside MULTI")
	}
	counter := d.Class == ClassCounter
	physical := d.Class >= ClassReplicated // writes must reach replicas or shards
	n := len(args)
	switch {
	case eqFold(name, "GET") && n == 2, eqFold(name, "GETEX") && n == 2:
		d.Op = OpGet
	case eqFold(name, "STRLEN") && n == 2 && counter:
		d.Op = OpStrlen
	case eqFold(name, "TYPE") && n == 2 && counter:
		d.Op = OpType
	case eqFold(name, "MGET") && n >= 2:
		d.Op = OpMGet
	case eqFold(name, "EXISTS") && n >= 2 && counter:
		d.Op = OpExists
	case (eqFold(name, "DEL") || eqFold(name, "UNLINK")) && n >= 2 && physical:
		d.Op = OpDel
	case eqFold(name, "MSET") && n >= 3 && n%2 == 1 && physical:
		d.Op = OpMSet
	case eqFold(name, "MSETNX") && physical:
		d.Op = OpRefuse
		d.Err = "ERR heatsink: MSETNX cannot be atomic across a key mitigated by " + MitigationName(d.Entry) + "; set the keys one by one"
	case physical && isSetFamily(name):
		if hasSetGet(name, args) {
			// SET ... GET would need the old value and the write as one
			// step across the physical keys.
			d.Op = OpRefuse
			d.Err = "ERR heatsink: SET with GET on a key mitigated by " + MitigationName(d.Entry) + " is not supported"
			return d
		}
		d.Op = OpSet
	case physical && isIncrFamily(name):
		d.Op = OpIncr
	case counter && n >= 2 && isExpireFamily(name):
		d.Op = OpExpire
	case counter && n == 2 && isTTLFamily(name):
		d.Op = OpTTL
	case d.Class == ClassCache && readMove(d.Entry) && c.Cacheable(args):
		d.Op = OpRead
	case rawOK:
		d.Op = OpRaw
	default:
		return refuse("")
	}
	return d
}

// readMove reports whether an entry asks the engine to relieve its reads:
// coalescing, a local cache or replica reads.
func readMove(en *routing.Entry) bool {
	return en != nil && (en.Coalesce || en.LocalCache != nil || en.ReplicaReads != nil)
}

// classifyMembers is Classify for a command naming a member split: the
// commands members.go, zset.go and set.go serve, and the whole-key ones
// (DEL, UNLINK, EXISTS, TYPE, the expiry commands: memberkeys.go,
// expire.go), go to the engine; a malformed form of one goes raw (Redis
// answers its arity error from the base key and writes nothing); anything
// else is refused.
func classifyMembers(d Decision, name []byte, args [][]byte) Decision {
	n := len(args)
	switch {
	case (eqFold(name, "DEL") || eqFold(name, "UNLINK")) && n >= 2:
		d.Op = OpDel
		return d
	case eqFold(name, "EXISTS") && n >= 2:
		d.Op = OpExists
		return d
	case eqFold(name, "TYPE"):
		d.Op = opIf(n == 2, OpType)
		return d
	case isExpireFamily(name):
		d.Op = opIf(n >= 3 || eqFold(name, "PERSIST") && n == 2, OpExpire)
		return d
	case isTTLFamily(name):
		d.Op = opIf(n == 2, OpTTL)
		return d
	}
	if op, ok := memberOps(d.Entry.Split.Kind)[strings.ToUpper(string(name))]; ok {
		switch {
		case !op.wellFormed(len(args)):
			d.Op = OpRaw
		case op.form != nil:
			d.Op = op.form(args)
		default:
			d.Op = OpMembers
		}
		if d.Op != OpRefuse {
			return d
		}
	}
	by := "field"
	if d.Entry.Split.Kind != routing.KindHash {
		by = "member"
	}
	d.Op = OpRefuse
	d.Err = "ERR heatsink: " + strings.ToUpper(string(name)) + " on a key mitigated by " + MitigationName(d.Entry) + " by " + by + " is not supported"
	return d
}

// opIf is op for a well-formed command, else OpRaw: Redis answers a
// malformed one with its own error and writes nothing.
func opIf(wellFormed bool, op Op) Op {
	if wellFormed {
		return op
	}
	return OpRaw
}

func isSetFamily(name []byte) bool {
	return eqFold(name, "SET") || eqFold(name, "SETNX") || eqFold(name, "SETEX") || eqFold(name, "PSETEX")
}

func isIncrFamily(name []byte) bool {
	return eqFold(name, "INCR") || eqFold(name, "DECR") || eqFold(name, "INCRBY") || eqFold(name, "DECRBY")
}

func isExpireFamily(name []byte) bool {
	return eqFold(name, "EXPIRE") || eqFold(name, "PEXPIRE") || eqFold(name, "EXPIREAT") || eqFold(name, "PEXPIREAT") || eqFold(name, "PERSIST")
}

func isTTLFamily(name []byte) bool {
	return eqFold(name, "TTL") || eqFold(name, "PTTL") || eqFold(name, "EXPIRETIME") || eqFold(name, "PEXPIRETIME")
}

// hasSetGet reports whether a SET carries the GET option (after its key
// and value).
func hasSetGet(name []byte, args [][]byte) bool {
	if !eqFold(name, "SET") {
		return false
	}
	for i := 3; i < len(args); i++ {
		if eqFold(args[i], "GET") {
			return true
		}
	}
	return false
}

// unsafeString views b as a string without copying, for map lookups.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func eqFold(b []byte, s string) bool { return command.EqFold(b, s) }
