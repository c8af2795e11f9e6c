package sys

import "errors"

// Errors of SetCongestion.
var (
	// ErrNoAlgorithm: the kernel has no congestion control of that name
	// (net.ipv4.tcp_available_congestion_control lists those it has).
	ErrNoAlgorithm = errors.New("the kernel has no such algorithm")
	// ErrAlgorithmNotAllowed: the process may not choose it.
	ErrAlgorithmNotAllowed = errors.New("not allowed for this process")
)
