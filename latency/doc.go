// Package latency records operation latencies in HDR histograms and
// summarizes them in percentiles: `xfer bench` and `xfer kv bench` record
// every operation, and the pages client every fetch.
//
// A [Histogram] holds latencies from 1 ns to [Max] with three significant
// digits; a latency outside that range is clamped into it. Recording
// allocates nothing once the histogram is in use (a zero Histogram
// allocates its counts on the first record, one from [New] up front), so
// it may sit on a hot path.
//
// A Histogram is for one goroutine: the benchmarks give each worker its
// own and [Histogram.Merge] them at the end. A [Locked] is a Histogram
// behind a mutex, for recorders on several goroutines (a record holds the
// lock for some tens of nanoseconds).
//
// Zero values of both are empty histograms, ready to use. Nothing holds a
// resource: there is nothing to close.
package latency
