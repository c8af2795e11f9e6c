package testutil

import (
	"testing"
	"time"
)

// EndsWithin runs call and fails tb unless it returns within d; it returns
// call's error.
func EndsWithin(tb testing.TB, d time.Duration, call func() error) error {
	tb.Helper()
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		tb.Fatalf("the call still waits after %v", d)
		return nil
	}
}
