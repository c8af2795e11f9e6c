package xfer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/metrics"
)

// The engine's side of its Prometheus metrics (Config.Metrics), which
// internal/metrics keeps: building them, the state they read at scrape
// time, and the hooks that translate the engine's types (errors, events)
// to their labels.

// newEngineMetrics builds e's metrics and registers them on reg.
func newEngineMetrics(e *Engine, reg prometheus.Registerer) (*metrics.Set, error) {
	cfg := metrics.Config{AuthPlane: PlanePeer, AuthReasons: auth.Reasons, Source: (*metricsSource)(e)}
	for name := range e.transports {
		cfg.Transports = append(cfg.Transports, metrics.Transport{Name: name, Caps: e.caps(name)})
	}
	names := transportNames()
	cfg.FallbackFrom = names[:len(names)-1] // the last one has nothing to fall back to
	return metrics.New(reg, cfg)
}

// metricsSource is the engine as its metrics read it when Prometheus
// scrapes (metrics.Source).
type metricsSource Engine

// dirStates are the states of a directory entry, each a series of
// xfer_directory_registration.
var dirStates = []string{string(directory.Registered), string(directory.Retrying), string(directory.Lost)}

// Snapshot returns the transports' devices and rails, the transport of
// each peer with a live connection, the pool, the regions and the
// directory entry.
func (s *metricsSource) Snapshot() metrics.Snapshot {
	e := (*Engine)(s)
	var snap metrics.Snapshot
	for name, t := range e.transports {
		d := t.Devices()
		ts := metrics.TransportState{Name: name, Rails: d.Rails}
		if d.InUse != nil {
			ts.Device = d.InUse.Device
		}
		snap.Transports = append(snap.Transports, ts)
	}
	for _, p := range e.Peers() {
		ep := p.current()
		if ep == nil {
			continue
		}
		select {
		case <-ep.Done():
			continue
		default:
		}
		snap.Connected = append(snap.Connected, ep.Transport())
	}
	snap.Pool = e.pool.Stats()
	snap.Regions = e.regions.Len()
	if r, ok := e.registration(); ok {
		snap.Directory = &metrics.Registration{State: string(r.State), States: dirStates, Reregistrations: r.Reregistrations}
	}
	return snap
}

// opFailed counts a failed operation of kind op and records it as the
// peer's last error. Off the hot path: it resolves its labels each time.
func (p *Peer) opFailed(op metrics.Op, err error) {
	p.e.metrics.OpFailed(op, metrics.ErrorKind(err))
	p.stats.SetErr(err)
}

// fellBack counts and records a fallback from transport t for a reason
// (one of the fallback reasons, metrics.Reason*), and logs it (at Warn
// once per peer and reason; detail is the error text).
func (e *Engine) fellBack(peer, t, reason, detail, msg string, args ...any) {
	if m := e.metrics; m != nil {
		m.FellBack(t, reason)
	}
	e.stats.Fallback(FallbackEvent{Time: time.Now(), Peer: peer, Transport: t, Reason: reason, Detail: detail})
	e.stats.WarnOnce(e.log, peer, t+": "+detail, msg, args...)
}

// failedOver records that an operation of kind, whose connection on
// transport from was lost, completed on transport to after attempts posts:
// counted, shown in the status, and logged at Warn once per peer and pair
// of transports.
func (p *Peer) failedOver(from, to string, kind OpKind, attempts int) {
	e := p.e
	e.stats.Failover(FailoverEvent{Time: time.Now(), Peer: p.String(), From: from, To: to, Op: kind.String(), Attempts: attempts + 1, Reason: metrics.ReasonConnLost})
	if m := e.metrics; m != nil {
		m.FailedOver(from, to, metrics.ReasonConnLost)
	}
	e.stats.WarnOnce(e.log, p.String(), "failover "+from+" to "+to, "connection lost under an operation; it was repeated on a new connection",
		"op", kind, "from", from, "to", to)
}

// setupRetried counts a transient setup failure that is tried again.
func (e *Engine) setupRetried(t string) {
	e.stats.SetupRetries.Add(1)
	if m := e.metrics; m != nil {
		m.SetupRetried(t)
	}
}
