package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSetForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []any
		val  any
		opts []any
		ok   bool
	}{
		{"set", []any{"v"}, "v", []any{}, true},
		{"SET", []any{"v", "EX", "10", "NX"}, "v", []any{"EX", "10", "NX"}, true},
		{"setnx", []any{"v"}, "v", []any{"NX"}, true},
		{"SetEx", []any{int64(10), "v"}, "v", []any{"EX", int64(10)}, true},
		{"psetex", []any{"1500", "v"}, "v", []any{"PX", "1500"}, true},
		{"set", nil, nil, nil, false},
		{"setnx", []any{"v", "x"}, nil, nil, false},
		{"setex", []any{"v"}, nil, nil, false},
		{"psetex", []any{"1", "v", "x"}, nil, nil, false},
		{"append", []any{"v"}, nil, nil, false},
	} {
		val, opts, ok := SetForm(tc.name, tc.args)
		if ok != tc.ok || val != tc.val || !cmp.Equal(opts, tc.opts) {
			t.Errorf("SetForm(%s %v) = %v %v %v; want %v %v %v", tc.name, tc.args, val, opts, ok, tc.val, tc.opts, tc.ok)
		}
	}
}
