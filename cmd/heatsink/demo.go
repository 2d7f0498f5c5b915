package main

import "errors"

// runDemo is not implemented yet.
func runDemo(args []string) error { return errors.New("demo: not implemented yet") }
