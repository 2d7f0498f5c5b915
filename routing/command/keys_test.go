package command

import (
	"bytes"
	"testing"
)

func keyIndexes(args ...string) []int {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	info, _ := Lookup(b[0])
	var out []int
	info.ForEachKey(b, func(i int) bool { out = append(out, i); return true })
	return out
}

func TestForEachKey(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []int
	}{
		{[]string{"GET", "k"}, []int{1}},
		{[]string{"MGET", "a", "b", "c"}, []int{1, 2, 3}},
		{[]string{"MSET", "a", "1", "b", "2"}, []int{1, 3}},
		{[]string{"RENAME", "a", "b"}, []int{1, 2}},
		{[]string{"LMOVE", "a", "b", "LEFT", "RIGHT"}, []int{1, 2}},
		{[]string{"BITOP", "AND", "dest", "a", "b"}, []int{2, 3, 4}},
		{[]string{"EVAL", "return 1", "2", "a", "b", "argv"}, []int{3, 4}},
		{[]string{"EVAL", "return 1", "0", "argv"}, nil},
		{[]string{"EVAL", "return 1", "9", "a"}, []int{3}},
		{[]string{"EVAL", "return 1", "-1", "a"}, nil},
		{[]string{"ZUNION", "2", "a", "b", "WITHSCORES"}, []int{2, 3}},
		{[]string{"ZUNIONSTORE", "d", "2", "a", "b"}, []int{1, 3, 4}},
		{[]string{"SINTERCARD", "2", "a", "b", "LIMIT", "1"}, []int{2, 3}},
		{[]string{"BLMPOP", "0", "1", "l", "LEFT"}, []int{3}},
		{[]string{"XREAD", "COUNT", "1", "STREAMS", "s1", "s2", "0", "0"}, []int{4}},
		{[]string{"PING"}, nil},
	} {
		if got := keyIndexes(tc.args...); !equalInts(got, tc.want) {
			t.Errorf("%q: keys at %v, want %v", tc.args, got, tc.want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzForEachKey feeds arbitrary argument lists (split on spaces) to the
// key locator: it must never panic nor yield an index outside the args.
func FuzzForEachKey(f *testing.F) {
	for _, s := range []string{"MGET a b", "MSET a", "EVAL s 3 a", "ZUNIONSTORE d", "ZUNIONSTORE", "XREAD STREAMS", "BITOP AND", "EVAL s 99999999999999999999 a", "LMOVE a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := bytes.Split([]byte(s), []byte(" "))
		if len(args[0]) == 0 {
			return
		}
		info, _ := Lookup(args[0])
		info.ForEachKey(args, func(i int) bool {
			if i <= 0 || i >= len(args) {
				t.Fatalf("%q: key index %d outside 1..%d", s, i, len(args)-1)
			}
			return true
		})
	})
}
