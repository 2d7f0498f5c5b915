package watch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/heatsink-dev/heatsink/routing"
)

// StreamContentType marks a node agent's answer to a routing request with
// stream=1 as a stream of frames (an agent that predates streams answers
// the same request as a long poll, with the table as application/json).
const StreamContentType = "application/vnd.heatsink.routing-stream.v1"

// A frame is a header line of two decimal numbers, the table's version and
// its length in bytes, then the table:
//
//	"<version> <length>\n" <length bytes of routing.json>
//
// A heartbeat is the frame "0 0\n": no table, only a sign of life. The
// header is text so that the stream can be read with curl; the length,
// rather than a line per table, keeps the table's bytes as published.
const maxHeaderLen = 2*20 + 2 // two int64s, a space and the newline

// AppendFrame appends the frame of the table of version to b (a heartbeat
// for version 0 and no table).
func AppendFrame(b []byte, version int64, table []byte) []byte {
	b = strconv.AppendInt(b, version, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(table)), 10)
	b = append(b, '\n')
	return append(b, table...)
}

// ErrFrame reports a malformed frame.
var ErrFrame = errors.New("watch: malformed routing stream frame")

// ReadFrames reads frames from r until it fails, and calls f with each:
// version 0 and a nil table for a heartbeat. table is valid only during
// the call. It returns io.EOF at a clean end between frames, ErrFrame (with
// the reason) for a malformed header, a version below 0, a table without a
// version or one over routing.MaxTableBytes, and the reader's error
// otherwise.
func ReadFrames(r *bufio.Reader, f func(version int64, table []byte)) error {
	var buf []byte
	for {
		line, err := r.ReadSlice('\n')
		switch {
		case len(line) > maxHeaderLen || errors.Is(err, bufio.ErrBufferFull):
			return fmt.Errorf("%w: header longer than %d bytes", ErrFrame, maxHeaderLen)
		case err == io.EOF && len(line) == 0:
			return io.EOF
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
		vs, ns, ok := bytes.Cut(line[:len(line)-1], []byte{' '})
		if !ok {
			return fmt.Errorf("%w: header %q is not \"<version> <length>\"", ErrFrame, line)
		}
		version, err1 := strconv.ParseInt(string(vs), 10, 64)
		n, err2 := strconv.ParseInt(string(ns), 10, 64)
		switch {
		case err1 != nil || err2 != nil:
			return fmt.Errorf("%w: header %q is not \"<version> <length>\"", ErrFrame, line)
		case version < 0 || n < 0:
			return fmt.Errorf("%w: negative version or length in %q", ErrFrame, line)
		case n > routing.MaxTableBytes:
			return fmt.Errorf("%w: table of %d bytes, over the %d-byte limit", ErrFrame, n, routing.MaxTableBytes)
		case version == 0 && n > 0:
			return fmt.Errorf("%w: a table without a version", ErrFrame)
		case version == 0:
			f(0, nil)
			continue
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		f(version, buf)
	}
}
