//go:build !linux

package proxy

import (
	"errors"
	"net"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
)

// The event loop is Linux only (epoll); elsewhere every client gets a
// session goroutine.
type loop struct{}

func loopEligible(*Config) bool { return false }

func newLoop(*Proxy) (*loop, error) {
	return nil, errors.New("event loop: not supported on this platform")
}

func (l *loop) start()                         {}
func (l *loop) adopt(net.Conn) bool            { return false }
func (l *loop) shutdown(<-chan time.Time) bool { return true }

func (l *loop) post(func()) bool              { return false }
func (l *loop) fenceDown()                    {}
func (l *loop) orderSessions(*order.Arrivals) {}

func (l *loop) pipeInput(net.Conn) *pipeIn { return nil }

// The event loop alone runs a TLS connection over its descriptor.
func (t *tlsTransport) readFD([]byte) (int, error)  { return 0, errors.ErrUnsupported }
func (t *tlsTransport) writeFD([]byte) (int, error) { return 0, errors.ErrUnsupported }
