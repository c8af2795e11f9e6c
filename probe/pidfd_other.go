//go:build !linux

package probe

func probePidfd() error { return Memfd() }
