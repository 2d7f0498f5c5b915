package redishook

import "github.com/heatsink-dev/heatsink/dataplane/counts"

// The hook finds the counts client's move outcomes by type assertion: a
// signature that drifted would compile and silently report nothing.
var _ outcomeObserver = (*counts.Client)(nil)
