//go:build !linux

package order

import "net"

// Without epoll, sessions are not ordered by the kernel's order of their
// clients' bytes (arrivals_linux.go): every call does nothing.

// Arrivals is nil: no session is in it.
type Arrivals struct{}

// Member is a session's part of Arrivals: never made.
type Member struct{ conn net.Conn }

func New(func(), func([]byte) bool) *Arrivals { return nil }
func (a *Arrivals) Close()                    {}
func (a *Arrivals) Add(net.Conn) *Member      { return nil }
func (a *Arrivals) Remove(*Member)            {}
func (a *Arrivals) Wait(*Member)              {}
func (a *Arrivals) Handled(*Member)           {}
func (a *Arrivals) Reading(*Member, bool)     {}

func (a *Arrivals) Read(s *Member, b []byte) (int, error) { return s.conn.Read(b) }

func (a *Arrivals) Write(s *Member, b []byte) (int, error) { return s.conn.Write(b) }

func (a *Arrivals) Piped(*Member) {}
