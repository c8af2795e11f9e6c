//go:build race

package auth

const raceEnabled = true
