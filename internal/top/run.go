package top

import (
	"context"
	"io"
	"strings"
	"time"
)

// Options are how Run shows the keys.
type Options struct {
	JSON  bool   // one JSON document a refresh, instead of the table
	Sort  string // one of Sorts
	Limit int    // keys a policy, at most; 0: all
	Width int    // the table's width in columns
	// Clear, for a terminal: each table is drawn over the last instead of
	// following it after a blank line.
	Clear    bool
	Once     bool          // print one frame and return
	Interval time.Duration // between refreshes
	Now      func() time.Time
}

// Run shows src's keys on w: once (one list), or every Interval from a
// watch until ctx ends (then it returns nil) or the watch fails for good.
func Run(ctx context.Context, src Source, w io.Writer, o Options) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Once {
		ps, rs, err := src.List(ctx)
		if err != nil {
			return err
		}
		return o.write(w, Build(o.Now(), ps, rs, o.Sort, o.Limit), true)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	st, err := src.Follow(ctx, errs)
	if err != nil {
		return err
	}
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for first := true; ; first = false {
		ps, rs := st.Snapshot()
		if err := o.write(w, Build(o.Now(), ps, rs, o.Sort, o.Limit), first); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-tick.C:
		}
	}
}

func (o Options) write(w io.Writer, f Frame, first bool) error {
	if o.JSON {
		return JSON(w, f)
	}
	if !o.Clear {
		if !first {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		return Table(w, f, o.Width)
	}
	// Redraw in place without a blank flash: cursor home, each line cleared
	// to its end as it is written, then the rest of the screen cleared.
	var b strings.Builder
	if err := Table(&b, f, o.Width); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\x1b[H"+strings.ReplaceAll(b.String(), "\n", "\x1b[K\n")+"\x1b[J")
	return err
}
