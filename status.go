package xfer

import (
	"slices"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/mem"

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
type DirectoryStatus struct {
	URL string `json:"url"`
	// Registration is the entry's state (registered; retrying: renewals
	// are failing; lost: it is being registered again), when and why it
	// entered it, and how often it was lost and registered again.
	Registration *directory.Registration `json:"registration,omitempty"`
}

// GPUStatus describes an engine's use of GPUs: the devices it has opened
// and the pinned host memory that stages GPU memory for transports that
// move host memory only (tcp, and rdma's local operations).
type GPUStatus struct {
	Devices []int `json:"devices"`
	// StagingBytes is the staging memory's size (0 before the first
	// staged operation), StagingUsedBytes what operations in flight hold,
	// and StagingPinned whether the driver pinned it (unpinned staging
	// works, slower).
	StagingBytes     uint64 `json:"staging_bytes"`
	StagingUsedBytes uint64 `json:"staging_used_bytes"`
	StagingPinned    bool   `json:"staging_pinned"`
}

// TransportStatus says whether a transport can be used on this host.
type TransportStatus struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Reason is why it is not available (the probe's error), or why the
	// policy excludes it.
	Reason string `json:"reason,omitempty"`
	// Caps are what the transport can do: same host only, several
	// connections, the memory kinds it moves itself, and who enforces a
	// region's rights against a peer.
	Caps transport.Caps `json:"caps"`
	// Device is the device, port and GID the transport has open (rdma's).
	Device *transport.DeviceInUse `json:"device,omitempty"`
	// Rails are the devices of a transport over several (rdma.devices):
	// each up or down, and how often it failed under a connection.
	Rails []RailStatus `json:"rails,omitempty"`
}

// RailStatus describes one device (rail) of a transport over several.
type RailStatus = transport.RailStatus

// PeerStatus describes one peer. Ops, Bytes and LastError are kept only
// when the engine has metrics (Config.Metrics); without them they stay 0
// and empty.
type PeerStatus struct {
	Addr      string `json:"addr"`
	ID        string `json:"id"`
	Transport string `json:"transport"`
	// Connected reports whether the peer's current connection is up;
	// UpSince is when it came up.
	Connected bool      `json:"connected"`
	UpSince   time.Time `json:"up_since,omitzero"`
	// Ops and Bytes count this engine's completed operations with the
	// peer and their payload bytes, both ways.
	Ops         uint64    `json:"ops"`
	Bytes       uint64    `json:"bytes"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Paused are the better transports a dialed peer lost and probes,
	// with backoff, to move back to (see docs/OPERATIONS.md).
	Paused []PausedTransport `json:"paused,omitempty"`
}

// PoolStatus is the default pool's state, in bytes.
type PoolStatus struct {
	Capacity      uint64  `json:"capacity_bytes"`
	Used          uint64  `json:"used_bytes"`
	Free          uint64  `json:"free_bytes"`
	LargestFree   uint64  `json:"largest_free_bytes"`
	Fragmentation float64 `json:"fragmentation"`
	Allocated     int     `json:"allocated_buffers"`
	Failures      uint64  `json:"failed_allocs"`
	// Memory is where the pool lives: "host" or "cuda:N".
	Memory string `json:"memory"`
}

// Status returns the engine's status. It does not open an rdma device that
// is not open yet, beyond what Available does.
func (e *Engine) Status() Status {
	s := Status{
		ID:              e.id.String(),
		Policy:          e.cfg.Transport,
		Addr:            e.addr,
		Fallbacks:       e.stats.fallbacks.Load(),
		SetupRetries:    e.stats.setupRetries.Load(),
		RecentFallbacks: e.stats.recentFallbacks(),
		Failovers:       e.stats.failovers.Load(),
		RecentFailovers: e.stats.recentFailovers(),
		Regions:         e.regions.Len(),
	}
	s.AuthFailures, s.RecentAuthFailures = e.auth.Snapshot()
	for _, name := range transportNames() {
		t := e.transports[name]
		ts := TransportStatus{Name: name, Available: true, Caps: e.caps(name)}
		if err := t.Available(); err != nil {
			ts.Available, ts.Reason = false, err.Error()
		} else if e.cfg.Transport != PolicyAuto && Policy(name) != e.cfg.Transport {
			ts.Reason = "not used: the policy is " + string(e.cfg.Transport)
		}
		d := t.Devices()
		ts.Device, ts.Rails = d.InUse, d.Rails
		s.Transports = append(s.Transports, ts)
	}
	for _, p := range e.Peers() {
		s.Peers = append(s.Peers, p.status())
	}
	slices.SortFunc(s.Peers, func(a, b PeerStatus) int {
		if a.Addr != b.Addr {
			if a.Addr < b.Addr {
				return -1
			}
			return 1
		}
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	ps := e.pool.Stats()
	s.Pool = PoolStatus{Capacity: ps.Capacity, Used: ps.InUse, Free: ps.Free, LargestFree: ps.LargestFree,
		Fragmentation: ps.Fragmentation, Allocated: ps.Allocated, Failures: ps.Failures,
		Memory: e.region.Location().String()}
	s.GPU = e.gpuStatus()
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
	s.Paused = p.pausedStatus()
	s.LastError, s.LastErrorAt = p.stats.LastErr()
	return s
}

// gpuStatus is the GPU part of Status, or nil before the engine used a
// GPU.
func (e *Engine) gpuStatus() *GPUStatus {
	var devs []int
	for _, l := range e.gpu.Opened() {
		if l.Kind == mem.KindCUDA {
			devs = append(devs, l.Device)
		}
	}
	if len(devs) == 0 {
		return nil
	}
	st := e.stager().Stats()
	return &GPUStatus{Devices: devs, StagingBytes: st.Bytes, StagingUsedBytes: st.UsedBytes, StagingPinned: st.Pinned}
}
