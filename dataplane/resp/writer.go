package resp

import (
	"io"
	"strconv"
)

// Writer batches output for one connection: a proxy appends every reply of
// a pipeline and writes them with one system call.
type Writer struct {
	wr  io.Writer
	Buf []byte
}

// NewWriter returns a Writer with an initial capacity of size bytes.
func NewWriter(wr io.Writer, size int) *Writer {
	return &Writer{wr: wr, Buf: make([]byte, 0, size)}
}

// Write appends p (raw RESP) to the batch.
func (w *Writer) Write(p []byte) { w.Buf = append(w.Buf, p...) }

// Flush writes the batch. The buffer is kept (and shrunk back when a huge
// value made it grow) so that steady state does not allocate.
func (w *Writer) Flush() error {
	if len(w.Buf) == 0 {
		return nil
	}
	_, err := w.wr.Write(w.Buf)
	if cap(w.Buf) > 4<<20 {
		w.Buf = make([]byte, 0, 64<<10)
	} else {
		w.Buf = w.Buf[:0]
	}
	return err
}

// AppendArgs appends a command as a RESP array of bulk strings.
func AppendArgs(b []byte, args [][]byte) []byte {
	b = AppendArrayHeader(b, len(args))
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// AppendArrayHeader appends "*n\r\n".
func AppendArrayHeader(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// AppendBulk appends a bulk string.
func AppendBulk(b, v []byte) []byte { return appendBulk(b, v) }

// AppendBulkString appends a bulk string.
func AppendBulkString(b []byte, v string) []byte { return appendBulk(b, v) }

func appendBulk[T string | []byte](b []byte, v T) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, '\r', '\n')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// AppendInt appends an integer reply.
func AppendInt(b []byte, n int64) []byte {
	b = append(b, ':')
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendStatus appends a simple string reply ("+OK").
func AppendStatus(b []byte, s string) []byte {
	b = append(b, '+')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendError appends an error reply. msg should start with an upper-case
// error code ("ERR ...", "MOVED ..."); CR and LF are replaced by spaces so
// that the reply stays one line.
func AppendError(b []byte, msg string) []byte {
	b = append(b, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// AppendNull appends the null reply of the protocol version (2 or 3).
func AppendNull(b []byte, proto int) []byte {
	if proto >= 3 {
		return append(b, '_', '\r', '\n')
	}
	return append(b, '$', '-', '1', '\r', '\n')
}
