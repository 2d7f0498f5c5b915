package main

import "errors"

// runProxy is not implemented yet.
func runProxy(args []string) error { return errors.New("proxy: not implemented yet") }
