package pages

import "github.com/xferio/xfer/latency"

// Latency summarizes recorded fetch latencies: their count, mean, maximum
// and percentiles.
type Latency = latency.Summary
