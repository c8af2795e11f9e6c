//go:build !cgo

package main

import "os"

// getenv is os.Getenv: without cgo there is no C caller to set anything.
func getenv(name string) string { return os.Getenv(name) }
