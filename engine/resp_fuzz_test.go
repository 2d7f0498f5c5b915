package engine

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadReply feeds arbitrary bytes to the tracking connection's RESP
// reader: it must return a value or an error, never panic or over-allocate.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR x\r\n", ":42\r\n", "$3\r\nabc\r\n", "$-1\r\n", "_\r\n",
		"*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n+k\r\n+v\r\n",
		">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n", ">2\r\n$10\r\ninvalidate\r\n_\r\n",
		"|1\r\n+a\r\n+b\r\n+real\r\n", "!3\r\nerr\r\n", "$99999999999\r\n", "*-1\r\n", "x\r\n", "$3\r\nabcde",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReader(bytes.NewReader(data))
		for i := 0; i < 8; i++ {
			if _, err := readReply(br); err != nil {
				if _, ok := err.(redisError); !ok {
					return
				}
			}
		}
	})
}

func TestReadReplyPush(t *testing.T) {
	br := bufio.NewReader(bytes.NewReader([]byte(">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n")))
	v, err := readReply(br)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := v.(push)
	if !ok || len(p) != 2 || string(asBytes(p[0])) != "invalidate" || len(p[1].([]any)) != 2 {
		t.Fatalf("push = %#v", v)
	}
}
