// Package metrics is an engine's Prometheus metrics (xfer.Config.Metrics):
// the vectors and descriptions of the xfer_* series, the counters of each
// connection and of those gone, the sampling of latencies, and the
// collector that sums them and reads the engine's state when Prometheus
// scrapes. docs/OPERATIONS.md lists the series; their names, labels and
// help texts are pinned by the root package's and cmd/xfer's tests.
//
// The engine holds a *Set, built in Open (New) and unregistered in Close
// (Unregister); a nil *Set is an engine without metrics, and the engine
// checks for nil before every use. What the collector needs of the engine
// (its transports' devices and rails, the peers' live connections, the
// pool, the regions, the directory entry) it asks through Source, one
// Snapshot per scrape. The engine translates its own types to labels (an
// error to a kind, OpKind to an Op through OpOf) and calls the hooks
// (OpFailed, FellBack, FailedOver, SetupRetried, Stalled, AuthFailed).
//
// The hot path: each connection (endpoint) has a *Conn, made by NewConn
// and held beside the endpoint, whose counters are plain atomics and whose
// latency histograms are resolved when it is made, so that an operation
// only adds and observes (no label lookup, no allocation). An endpoint
// that counts its own operations (transport.Counter) is read at scrape
// time instead, and the Conn then counts only what never reached it and
// the messages received.
//
// Threading: every method may be called from any goroutine. A Set's
// label lookups and its table of connections take its lock; a Conn's
// counters are atomics; a Snapshot is taken outside the lock.
//
// Lifetimes: a Conn is live from NewConn until Retire (or the NewConn
// that replaces it), which adds its counts, once, into its transport's
// totals of connections gone, so that the sums never go back; counting on
// a retired Conn afterwards is harmless but no longer scraped. The Set
// lives from New to Unregister; Unregister removes every collector it
// registered, so that a new engine may register on the same registry.
package metrics
