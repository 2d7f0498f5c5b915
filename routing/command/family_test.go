package command

import (
	"math/bits"
	"testing"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestEveryCommandHasOneFamily walks the whole table: every command has
// exactly one family, and the table's own flags agree with it (a typed
// command is in a family of its type, a script in FamScript, a string
// command in none of the typed ones), so a command added to the table
// without a family lands in FamOther, whose keys no move that could
// refuse it is chosen for.
func TestEveryCommandHasOneFamily(t *testing.T) {
	typed := routing.FamHashRead | routing.FamHashWrite | routing.FamHashCounter | routing.FamHashOther | routing.FamSetRead | routing.FamSetWrite |
		routing.FamZSetRead | routing.FamZSetWrite | routing.FamOrdered | routing.FamZSetOther | routing.FamSetOther
	for _, name := range Names() {
		c, _ := Lookup([]byte(name))
		f := c.Family()
		if bits.OnesCount32(uint32(f)) != 1 || f&^routing.FamAll != 0 || f == routing.FamTx || f == routing.FamUnknown {
			t.Errorf("%s: family %v (%#x), want exactly one command family", name, f, uint32(f))
		}
		switch {
		case c.Scripting && f != routing.FamScript:
			t.Errorf("%s runs a script but has family %v", name, f)
		case !c.Scripting && f == routing.FamScript:
			t.Errorf("%s has family script but runs none", name)
		case c.Typed && f&typed == 0:
			t.Errorf("%s acts on a hash, list, set, sorted set or stream but has family %v", name, f)
		case c.Write && (f == routing.FamStringRead || f == routing.FamHashRead || f == routing.FamSetRead):
			t.Errorf("%s may write but has a read family %v", name, f)
		}
	}
}

// TestFamilyOfOptions: the options that change what the engine can serve
// change the family.
func TestFamilyOfOptions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want routing.Families
	}{
		{[]string{"SET", "k", "v"}, routing.FamStringWrite},
		{[]string{"set", "k", "v", "EX", "10"}, routing.FamStringWrite},
		{[]string{"SET", "k", "v", "get"}, routing.FamOther},
		{[]string{"GETEX", "k"}, routing.FamStringRead},
		{[]string{"GETEX", "k", "PERSIST"}, routing.FamOther},
		{[]string{"lpush", "q", "a"}, routing.FamOrdered},
		{[]string{"EVALSHA", "abc", "1", "k"}, routing.FamScript},
		{[]string{"HINCRBY", "h", "f", "1"}, routing.FamHashCounter},
		{[]string{"INCRBYFLOAT", "k", "1.5"}, routing.FamOther},
		{[]string{"ZADD", "z", "INCR", "1", "m"}, routing.FamZSetWrite},
		{[]string{"zadd", "z", "incr", "1", "m"}, routing.FamZSetWrite},
		{[]string{"ZADD", "z", "1", "m"}, routing.FamZSetOther},
		{[]string{"ZADD", "z", "XX", "INCR", "1", "m"}, routing.FamZSetOther},
		{[]string{"ZINCRBY", "z", "1", "m"}, routing.FamZSetWrite},
		{[]string{"ZRANGE", "z", "0", "4"}, routing.FamZSetRead},
		{[]string{"ZRANGE", "z", "0", "4", "rev", "WITHSCORES"}, routing.FamZSetRead},
		{[]string{"ZRANGE", "z", "0", "4", "BYSCORE"}, routing.FamZSetOther},
		{[]string{"ZRANGE", "z", "0", "4", "REV", "REV"}, routing.FamZSetOther},
		{[]string{"ZRANGE", "z", "(1", "4", "BYSCORE", "LIMIT", "0", "1"}, routing.FamZSetOther},
		{[]string{"SADD", "s", "a"}, routing.FamSetWrite},
		{[]string{"SREM", "s", "a"}, routing.FamSetWrite},
		{[]string{"SPOP", "s"}, routing.FamSetOther},
	} {
		args := make([][]byte, len(tc.args))
		for i, a := range tc.args {
			args[i] = []byte(a)
		}
		c, _ := Lookup(args[0])
		if got := c.FamilyOf(args); got != tc.want {
			t.Errorf("%q: family %v, want %v", tc.args, got, tc.want)
		}
	}
}
