package pages

import (
	"time"

	"github.com/xferio/xfer/latency"
)

// Latency summarizes recorded fetch latencies: their count, mean, maximum
// and percentiles.
type Latency = latency.Summary

// epoch is a fixed instant that fetches are timed from: sinceEpoch reads
// the monotonic clock alone, where time.Now reads the wall clock too. On
// shm a fetch of a page costs a few hundred nanoseconds, and each clock
// read tens of them.
var epoch = time.Now()

// sinceEpoch is the time since epoch, from one monotonic clock read.
func sinceEpoch() time.Duration { return time.Since(epoch) }
