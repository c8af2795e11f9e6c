package xfer

import (
	"slices"
	"time"

	"github.com/xferio/xfer/internal/status"
	"github.com/xferio/xfer/transport"
)

// Status is a snapshot of an engine for operators: what `xfer status` and
// the CLI's /api/v1/transport/status show.
type Status struct {
	// ID is the engine's ID, Policy its transport policy and Addr the
	// address peers dial ("" when it does not listen).
	ID     string `json:"id"`
	Policy Policy `json:"policy"`
	Addr   string `json:"addr,omitempty"`
	// Transports are the engine's transports, best first, whether each is
	// available on this host and, when not, why.
	Transports []TransportStatus `json:"transports"`
	// Peers are the engine's peers (Engine.Peers), ordered by address.
	Peers []PeerStatus `json:"peers"`
	// Fallbacks and SetupRetries count since Open (Engine.Fallbacks,
	// Engine.SetupRetries); RecentFallbacks are the latest fallbacks,
	// oldest first (at most 32).
	Fallbacks       uint64          `json:"fallbacks"`
	SetupRetries    uint64          `json:"setup_retries"`
	RecentFallbacks []FallbackEvent `json:"recent_fallbacks"`
	// Failovers counts the operations that lost their connection and were
	// repeated on a new one (xfer_failovers_total); RecentFailovers are
	// the latest, oldest first (at most 32).
	Failovers       uint64          `json:"failovers"`
	RecentFailovers []FailoverEvent `json:"recent_failovers"`
	// AuthFailures count the callers refused since Open, by plane and
	// reason (Engine.AuthFailed); RecentAuthFailures are the latest,
	// oldest first (at most 32).
	AuthFailures       []AuthFailureCount `json:"auth_failures"`
	RecentAuthFailures []AuthFailure      `json:"recent_auth_failures"`
	// Pool is the default pool.
	Pool PoolStatus `json:"pool"`
	// Regions is the number of registered regions, the pool's included.
	Regions int `json:"regions"`
	// GPU is the engine's GPU side, once it has used a GPU.
	GPU *GPUStatus `json:"gpu,omitempty"`
	// Directory is the engine's place in its directory (Config.Directory),
	// unless it is p2p.
	Directory *DirectoryStatus `json:"directory,omitempty"`
}

// DirectoryStatus is an engine's directory and, when it has a node ID,
// the state of its entry there.
type DirectoryStatus = status.Directory

// GPUStatus describes an engine's use of GPUs: the devices it has opened
// and the pinned host memory that stages GPU memory.
type GPUStatus = status.GPU

// TransportStatus says whether a transport can be used on this host.
type TransportStatus = status.Transport

// RailStatus describes one device (rail) of a transport over several.
type RailStatus = transport.RailStatus

// PeerStatus describes one peer.
type PeerStatus = status.Peer

// PoolStatus is the default pool's state, in bytes.
type PoolStatus = status.Pool

// PausedTransport is a better transport a dialed peer lost and probes with
// backoff (PeerStatus.Paused).
type PausedTransport = status.Paused

// Status returns the engine's status. It does not open an rdma device that
// is not open yet, beyond what Available does.
func (e *Engine) Status() Status {
	s := Status{
		ID:           e.id.String(),
		Policy:       e.cfg.Transport,
		Addr:         e.addr,
		Fallbacks:    e.stats.Fallbacks.Load(),
		SetupRetries: e.stats.SetupRetries.Load(),
		Failovers:    e.stats.Failovers.Load(),
		Regions:      e.regions.Len(),
	}
	s.RecentFallbacks, s.RecentFailovers = e.stats.Recent()
	s.AuthFailures, s.RecentAuthFailures = e.auth.Snapshot()
	for _, name := range transportNames() {
		s.Transports = append(s.Transports, status.TransportOf(e.transports[name], e.caps(name), string(e.cfg.Transport)))
	}
	for _, p := range e.Peers() {
		s.Peers = append(s.Peers, p.status())
	}
	slices.SortFunc(s.Peers, status.ComparePeers)
	s.Pool = status.PoolOf(e.pool.Stats(), e.region.Location())
	s.GPU = status.GPUOf(e.gpu.Opened(), func() (uint64, uint64, bool) {
		st := e.stager().Stats()
		return st.Bytes, st.UsedBytes, st.Pinned
	})
	if e.Directory() != nil {
		s.Directory = &DirectoryStatus{URL: e.node.Load().URL()}
		if r, ok := e.registration(); ok {
			s.Directory.Registration = &r
		}
	}
	return s
}

// status is the peer's line of Status.
func (p *Peer) status() PeerStatus {
	s := PeerStatus{Addr: p.String(), ID: p.ID().String()}
	s.Ops, s.Bytes = p.stats.Totals()
	if ep := p.current(); ep != nil {
		s.Transport = ep.Transport()
		select {
		case <-ep.Done():
		default:
			s.Connected = true
		}
	}
	if t := p.stats.upSince.Load(); t != 0 {
		s.UpSince = time.Unix(0, t).UTC()
	}
	s.Paused = p.fb.Status()
	s.LastError, s.LastErrorAt = p.stats.LastErr()
	return s
}
