package sidecarlink

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

const (
	// RoutingPathPrefix is the prefix of the agent's routing paths:
	// RoutingPathPrefix + "<namespace>/<name>" is one policy's stream.
	RoutingPathPrefix = "/routing/v1/"
	// StreamContentType marks the agent's answer to a routing request: a
	// stream of frames (AppendFrame).
	StreamContentType = "application/vnd.heatsink.routing-stream.v1"
	// DefaultHeartbeat is the heartbeat interval of a request that names
	// none.
	DefaultHeartbeat = 30 * time.Second
	// MinHeartbeat and MaxHeartbeat bound the heartbeat interval a request
	// may ask for: a sidecar cannot make the agent write more often than
	// once a second, and an agent stays silent for at most five minutes.
	MinHeartbeat = time.Second
	MaxHeartbeat = 5 * time.Minute
)

// RoutingRequest is a sidecar's request for one policy's routing tables:
//
//	GET /routing/v1/<namespace>/<name>?after=<version>&heartbeat=<duration>
//
// The agent answers with a stream of every table newer than After, and a
// heartbeat frame every Heartbeat while nothing changes.
type RoutingRequest struct {
	Namespace, Name string
	// After is the newest version the sidecar holds or was served; 0 for
	// none.
	After int64
	// Heartbeat is how often the agent writes a heartbeat frame on an idle
	// stream; 0 for DefaultHeartbeat.
	Heartbeat time.Duration
}

// URI is the request's path and query.
func (r RoutingRequest) URI() string {
	q := url.Values{}
	q.Set("after", strconv.FormatInt(r.After, 10))
	if r.Heartbeat > 0 {
		q.Set("heartbeat", r.Heartbeat.String())
	}
	return RoutingPathPrefix + url.PathEscape(r.Namespace) + "/" + url.PathEscape(r.Name) + "?" + q.Encode()
}

// ErrRoutingRequest reports a request that names no policy.
var ErrRoutingRequest = errors.New("sidecarlink: not GET " + RoutingPathPrefix + "<namespace>/<name>?after=<version>")

// ParseRoutingRequest reads a routing request from its URL. It fails only
// when the path names no policy; a missing or malformed after is 0, and the
// heartbeat is DefaultHeartbeat when missing or malformed, and clamped to
// [MinHeartbeat, MaxHeartbeat].
func ParseRoutingRequest(u *url.URL) (RoutingRequest, error) {
	rest, ok := strings.CutPrefix(u.Path, RoutingPathPrefix)
	ns, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || ns == "" || name == "" || strings.Contains(name, "/") {
		return RoutingRequest{}, ErrRoutingRequest
	}
	q := u.Query()
	r := RoutingRequest{Namespace: ns, Name: name, Heartbeat: DefaultHeartbeat}
	if after, err := strconv.ParseInt(q.Get("after"), 10, 64); err == nil && after > 0 {
		r.After = after
	}
	if d, err := time.ParseDuration(q.Get("heartbeat")); err == nil {
		r.Heartbeat = min(max(d, MinHeartbeat), MaxHeartbeat)
	}
	return r, nil
}

// Policy is "<namespace>/<name>", as the counts name it.
func (r RoutingRequest) Policy() string { return r.Namespace + "/" + r.Name }

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
var ErrFrame = errors.New("sidecarlink: malformed routing stream frame")

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
