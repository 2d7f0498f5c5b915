//go:build !linux

package capture

import (
	"context"
	"errors"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// Capture is Linux only (AF_PACKET); elsewhere Open fails.
type Capture struct{}

// Open fails: packet capture needs Linux.
func Open(Config) (*Capture, error) { return nil, errors.New("capture: needs Linux (AF_PACKET)") }

// SetScope does nothing.
func (*Capture) SetScope(Scope) error { return nil }

// Stats is zero.
func (*Capture) Stats() Stats { return Stats{} }

// Run returns at once.
func (*Capture) Run(context.Context, func(string, []sidecarlink.Entry)) error { return nil }
