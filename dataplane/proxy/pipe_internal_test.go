package proxy

import "testing"

// TestUnasked: a subscribed client's pipe tells the frames Redis pushes
// unasked (messages, invalidations) from those that answer its commands,
// RESP2 and RESP3; only the latter take a fence down.
func TestUnasked(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", true},
		{">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", true},
		{"*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$1\r\nc\r\n$1\r\nm\r\n", true},
		{">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$1\r\nc\r\n$1\r\nm\r\n", true},
		{"*3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", true},
		{">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", true},
		{"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n", false},
		{">3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n", false},
		{"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n", false},
		{"*2\r\n$4\r\npong\r\n$0\r\n\r\n", false},
		{"+PONG\r\n", false},
		{"-ERR only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n", false},
		{"+1700000000.000000 [0 127.0.0.1:1] \"GET\" \"k\"\r\n", false},
		{"", false},
		{"*", false},
	} {
		if got := unasked([]byte(tc.raw)); got != tc.want {
			t.Errorf("unasked(%q) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

// TestFirstHandsOff: sessions wait for another client's pending command
// only if it may take another connection than the shared one; a command
// they cannot read whole counts as one that may.
func TestFirstHandsOff(t *testing.T) {
	var args [][]byte
	for _, tc := range []struct {
		b    string
		want bool
	}{
		{"", false},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", false},
		{"*3\r\n$7\r\nPUBLISH\r\n$1\r\nc\r\n$1\r\nm\r\n", false},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n", true}, // behind a GET: waited for too
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGET\r\n$1\r\nj\r\n", false},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\n", false}, // the rest of a pipeline not all here
		{"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n", true},
		{"*2\r\n$10\r\nPSUBSCRIBE\r\n$2\r\nc*\r\n", true},
		{"*1\r\n$7\r\nMONITOR\r\n", true},
		{"*2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n", true},
		{"*1\r\n$5\r\nMULTI\r\n", true},
		{"*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n", true},
		{"*1\r\n$9\r\nNOSUCHCMD\r\n", true},
		{"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\n", true}, // not all here
		{"SUBSCRIBE c\r\n", true},                 // inline
		{"*x\r\n", true},
	} {
		if got := handsOff([]byte(tc.b), &args, false); got != tc.want {
			t.Errorf("handsOff(%q) = %v, want %v", tc.b, got, tc.want)
		}
	}
}
