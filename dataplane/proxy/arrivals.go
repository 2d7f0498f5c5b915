package proxy

// Sessions in the order their clients' bytes came: arrivals_linux.go
// (elsewhere, arrivals_other.go does nothing).

// arrivalIO reads and writes the session's client, telling arrivals
// when the session reads it again, and when it waits for the client to
// take its replies.
type arrivalIO struct{ s *session }

func (r arrivalIO) Write(b []byte) (int, error) { return r.s.p.arrivals.write(r.s, b) }

func (r arrivalIO) Read(b []byte) (int, error) {
	s := r.s
	if !s.readingAhead { // not watchClient, which reads ahead while Redis blocks
		// Bytes buffered and not a command: a command's first part, all
		// the session can handle of what it read.
		s.p.arrivals.reading(s, s.cr.Buffered() > 0)
	}
	return s.p.arrivals.read(s, b)
}
