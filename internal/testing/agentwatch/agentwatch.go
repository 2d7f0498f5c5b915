// Package agentwatch reads a node's stream from the manager's hub as a
// node agent does, for tests that check what the hub sends.
package agentwatch

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// Read reads node's stream from the manager's hub at addr, as
// its node agent does, with token, reconnecting (the hub serves once the
// manager leads), until match accepts an event or timeout passes; it
// reports whether one was accepted.
func Read(addr, node, token string, timeout time.Duration, match func(*agentlink.Event) bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+agentlink.PathWatch+"?node="+node, nil)
		agentlink.SetToken(req, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		dec := json.NewDecoder(resp.Body)
		for {
			ev, err := agentlink.DecodeEvent(dec)
			if err != nil {
				break
			}
			if match(&ev) {
				resp.Body.Close()
				return true
			}
		}
		resp.Body.Close()
	}
	return false
}
