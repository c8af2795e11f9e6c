//go:build !linux

package sys

// EventFD is not supported on this platform.
type EventFD struct{}

// NewEventFD is not supported on this platform.
func NewEventFD(fd int) (*EventFD, error) { return nil, ErrNotSupported }

// Wait fails.
func (e *EventFD) Wait() error { return ErrNotSupported }

// Drain fails.
func (e *EventFD) Drain() error { return ErrNotSupported }

// Close does nothing.
func (e *EventFD) Close() error { return nil }

// Eventfd is not supported on this platform.
func Eventfd() (int, error) { return -1, ErrNotSupported }

// EventfdRing is not supported on this platform.
func EventfdRing(fd int) error { return ErrNotSupported }
