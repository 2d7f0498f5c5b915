package main

import (
	"fmt"

	"github.com/heatsink-dev/heatsink/internal/version"
)

// runVersion prints the release the binary was built as (stamped by
// `make image`; "dev" from a plain go build).
func runVersion(_ []string) error {
	fmt.Println(version.Version)
	return nil
}
