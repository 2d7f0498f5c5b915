package detector

import (
	"context"
	"errors"
	"net"
	"time"
	"unsafe"

	"github.com/heatsink-dev/heatsink/detector/wire"
)

// ingest reads batches until ctx ends. One reader is enough: decoding and
// counting a batch takes microseconds, and the socket's receive buffer
// absorbs bursts.
func (d *Detector) ingest(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = d.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, wire.MaxDatagram+1)
	var dec wire.Decoder
	for {
		n, _, err := d.conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			d.log.V(1).Info("ingest read failed", "err", err.Error())
			continue
		}
		d.handle(&dec, buf[:n])
	}
}

// handle counts one datagram. A bad batch is dropped whole and counted by
// reason; it never panics (the decoder is fuzzed).
func (d *Detector) handle(dec *wire.Decoder, buf []byte) {
	b, err := dec.Decode(buf)
	if err != nil {
		d.metrics.batches.WithLabelValues(wire.Reason(err)).Inc()
		return
	}
	d.mu.RLock()
	p := d.policies[string(b.Policy)] // no allocation: map index by conversion
	d.mu.RUnlock()
	if p == nil {
		d.metrics.batches.WithLabelValues("unknown_policy").Inc()
		return
	}
	now := d.opts.Clock.Now()
	counted, filtered := 0, 0
	p.mu.Lock()
	p.sk.Advance(now)
	for i := range b.Entries {
		e := &b.Entries[i]
		// The key aliases buf only for the calls below; the sketch copies
		// what it keeps.
		key := unsafe.String(unsafe.SliceData(e.Key), len(e.Key))
		if !p.filter.Match(key) {
			filtered++
			continue
		}
		p.sk.Update(key, e.Reads, e.Writes, e.Bytes)
		counted++
	}
	p.mu.Unlock()
	d.batches.Add(1)
	d.observations.Add(uint64(counted))
	d.metrics.accepted.Inc()
	d.metrics.counted.Add(float64(counted))
	if filtered > 0 {
		d.metrics.filtered.Add(float64(filtered))
	}
}
