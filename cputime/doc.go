// Package cputime measures the CPU time that processes use: this one
// ([Self], from getrusage) and another of this host ([Process], from
// /proc/<pid>/stat). `xfer bench` charges a run's CPU seconds per GB to
// itself and to the serve process it started, with a [Meter].
//
// CPU time is measured on Linux; elsewhere every call returns an error
// matching [ErrNotSupported].
//
// The functions hold no state but the clock tick rate, read once, and are
// safe for concurrent use.
package cputime
