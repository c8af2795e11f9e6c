//go:build race

package xfer_test

const raceEnabled = true
