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
