//go:build !linux

package proxy

// Without epoll, sessions are not ordered by the kernel's order of their
// clients' bytes (arrivals_linux.go): every call does nothing.

type arrivals struct{}

type arrivalState struct{}

func newArrivals(func(), bool) *arrivals   { return nil }
func (a *arrivals) close()                 {}
func (a *arrivals) add(*session) bool      { return false }
func (a *arrivals) remove(*session)        {}
func (a *arrivals) wait(*session)          {}
func (a *arrivals) handled(*session)       {}
func (a *arrivals) reading(*session, bool) {}

func (a *arrivals) read(s *session, b []byte) (int, error) { return s.conn.Read(b) }

func (a *arrivals) write(s *session, b []byte) (int, error) { return s.conn.Write(b) }

func (a *arrivals) piped(*session) {}
