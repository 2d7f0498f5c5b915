package proxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeFanout(t *testing.T) {
	for name, tc := range map[string]struct {
		replies      []string
		kill, exists bool
		want         string
	}{
		"all agree":                {replies: []string{"$3\r\nabc\r\n", "$3\r\nabc\r\n"}, want: "$3\r\nabc\r\n"},
		"one refuses":              {replies: []string{"+OK\r\n", "-ERR Library 'lib' already exists\r\n", "+OK\r\n"}, want: "-ERR Library 'lib' already exists\r\n"},
		"kill where it runs":       {replies: []string{"-NOTBUSY No scripts in execution right now.\r\n", "+OK\r\n"}, kill: true, want: "+OK\r\n"},
		"kill with nothing to do":  {replies: []string{"-NOTBUSY No scripts in execution right now.\r\n", "-NOTBUSY x\r\n"}, kill: true, want: "-NOTBUSY No scripts in execution right now.\r\n"},
		"kill of an unkillable":    {replies: []string{"-NOTBUSY a\r\n", "-UNKILLABLE b\r\n"}, kill: true, want: "-NOTBUSY a\r\n"},
		"exists only where all do": {replies: []string{"*3\r\n:1\r\n:1\r\n:0\r\n", "*3\r\n:1\r\n:0\r\n:0\r\n"}, exists: true, want: "*3\r\n:1\r\n:0\r\n:0\r\n"},
		"exists refused":           {replies: []string{"-ERR wrong\r\n", "*1\r\n:1\r\n"}, exists: true, want: "-ERR wrong\r\n"},
		"no master":                {want: "-" + errNoMaster + "\r\n"},
	} {
		var in [][]byte
		for _, r := range tc.replies {
			in = append(in, []byte(r))
		}
		if diff := cmp.Diff(tc.want, string(mergeFanout(in, tc.kill, tc.exists))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}
