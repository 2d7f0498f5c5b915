package engine_test

import (
	"slices"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// servedEntries are one entry of each class a move gives a key.
var servedEntries = map[string]*routing.Entry{
	"coalesce":      {Key: "k", Coalesce: true},
	"local cache":   {Key: "k", LocalCache: &routing.LocalCache{TTLMillis: 1000}},
	"replica reads": {Key: "k", ReplicaReads: &routing.ReplicaReads{MaxLagMillis: 100}},
	"shed":          {Key: "k", Shed: &routing.Shed{WritesPerSecond: 10, MinPerSecond: 1}},
	"replicate":     {Key: "k", Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 1000}},
	"split":         {Key: "k", Split: &routing.Split{Generations: []routing.Generation{{Shards: 4}}}},
	"member split":  {Key: "k", Split: &routing.Split{Generations: []routing.Generation{{Shards: 4}}, Members: true}},
	"zset split":    {Key: "k", Split: &routing.Split{Generations: []routing.Generation{{Shards: 4}}, Members: true, Kind: routing.KindZSet}},
	"set split":     {Key: "k", Split: &routing.Split{Generations: []routing.Generation{{Shards: 4}}, Members: true, Kind: routing.KindSet}},
	"pre-aggregate": {Key: "k", Split: &routing.Split{Generations: []routing.Generation{{Shards: 4}}}, PreAggregate: &routing.PreAggregate{FlushMillis: 100}},
}

// TestServedMatchesClassify checks routing.ServedBy, the table the manager
// chooses moves by, against what the engine does, command by command over
// the whole command table: every command of a family an entry serves is
// not refused on a key with that entry (in MULTI too when it serves
// FamTx), and every family it does not serve has a command it refuses, so
// the table claims neither too much nor too little.
func TestServedMatchesClassify(t *testing.T) {
	names := command.Names()
	slices.Sort(names)
	for move, en := range servedEntries {
		lookup := func(k string) (*routing.Entry, bool) {
			if k == "k" {
				return en, true
			}
			return nil, false
		}
		served := routing.ServedBy(en)
		refusedSome := map[routing.Families]bool{}
		for _, name := range names {
			args := command.Example(name, "k")
			if args == nil {
				continue
			}
			c, _ := command.Lookup(args[0])
			f := c.FamilyOf(args)
			for _, inTx := range []bool{false, true} {
				d := engine.Classify(args, lookup, inTx)
				if d.Class == engine.ClassNone {
					t.Fatalf("%s: %q names no key the engine sees", move, args)
				}
				refused := d.Op == engine.OpRefuse
				fam := f
				if inTx {
					fam |= routing.FamTx
				}
				if refused && served.Has(fam) {
					t.Errorf("%s serves %v (in MULTI: %v) but the engine refuses %q: %s", move, fam, inTx, args, d.Err)
				}
				if refused {
					refusedSome[f] = true
					if inTx {
						refusedSome[routing.FamTx] = true
					}
				}
			}
		}
		for f := routing.Families(1); f < routing.FamAll; f <<= 1 {
			if f == routing.FamUnknown {
				continue
			}
			if !served.Has(f) && !refusedSome[f] {
				t.Errorf("%s does not claim to serve %v, yet the engine refuses none of its commands: add it to its served set", move, f)
			}
		}
	}
}

// TestRelievedReadsMatchClassify checks routing.RelievedReads, by which
// the manager gives read moves only to keys whose reads they relieve,
// against the engine: on a coalesced or cached key, some command of each
// relieved family is answered by the engine (not sent raw), and no read
// of another family is.
func TestRelievedReadsMatchClassify(t *testing.T) {
	for _, move := range []string{"coalesce", "local cache"} {
		en := servedEntries[move]
		lookup := func(k string) (*routing.Entry, bool) { return en, k == "k" }
		engineServes := routing.Families(0)
		for _, name := range command.Names() {
			args := command.Example(name, "k")
			if args == nil {
				continue
			}
			c, _ := command.Lookup(args[0])
			if d := engine.Classify(args, lookup, false); d.Op != engine.OpRaw && d.Op != engine.OpRefuse && !c.Write {
				engineServes |= c.FamilyOf(args)
			}
		}
		if engineServes != routing.RelievedReads {
			t.Errorf("%s: the engine answers reads of %v itself, routing.RelievedReads says %v", move, engineServes, routing.RelievedReads)
		}
	}
}
