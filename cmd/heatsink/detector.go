package main

import "errors"

// runDetector is not implemented yet.
func runDetector(args []string) error { return errors.New("detector: not implemented yet") }
