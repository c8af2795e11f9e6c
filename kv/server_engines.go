package kv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/probe"
)

// NewServer opens the data-plane engine and its value pool.
func NewServer(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	full, err := ParseFullPolicy(string(opts.Full))
	if err != nil {
		return nil, err
	}
	opts.Full = full
	if opts.MaxKey == 0 {
		opts.MaxKey = DefaultMaxKey
	}
	if opts.MaxKey < 0 || opts.MaxValue < 0 {
		return nil, errors.New("kv: MaxKey and MaxValue must not be negative")
	}
	if err := semanticDefaults(&opts); err != nil {
		return nil, err
	}
	if opts.DiskDir != "" && opts.Full == Reject {
		return nil, errors.New("kv: a disk tier takes what eviction would drop, and the full policy reject never evicts: use evict")
	}
	if opts.DiskDir != "" && opts.DiskSize <= 0 {
		return nil, errors.New("kv: a disk tier (DiskDir) needs its size (DiskSize)")
	}
	inlineAuto := opts.InlineMax == 0
	if inlineAuto {
		opts.InlineMax = DefaultInlineMax
	}
	if opts.Engine.Listen == "" {
		opts.Engine.Listen = ":0"
	}
	if opts.Engine.TCP.PollSpin == 0 {
		opts.Engine.TCP.PollSpin = DefaultPollSpin
	}
	// Data-plane requests carry a key and, inline, a small value.
	if need := msgSize(opts.MaxKey, opts.InlineMax); opts.Engine.MaxMessage < need {
		opts.Engine.MaxMessage = need
	}
	if opts.Devices == 0 {
		opts.Devices = 1
	}
	if opts.Engine.Metrics == nil {
		opts.Engine.Metrics = opts.Metrics
	}
	es, err := openEngines(ctx, opts)
	if err != nil {
		return nil, err
	}
	e := es[0]
	capacity := int(e.Pool().Stats().Capacity)
	if opts.MaxValue == 0 || opts.MaxValue > capacity {
		opts.MaxValue = capacity
	}
	s := &Server{inlineAuto: inlineAuto, opts: opts, e: e, es: es, st: newStore(e.Pool(), opts.Full, storeOptions{
		leaseTTL: opts.LeaseTTL, keepSoft: opts.KeepSoftPinned, hiWater: opts.HighWatermark, ratio: opts.EvictionRatio, now: opts.now}), log: opts.Logger, peerWait: defaultPeerWait}
	if opts.DiskDir != "" {
		if err := openDiskTier(s.st, opts.DiskDir, opts.DiskSize, opts.DiskInFlight, opts.Logger); err != nil {
			for i := len(es) - 1; i >= 0; i-- {
				es[i].Close()
			}
			return nil, fmt.Errorf("kv: %w", err)
		}
	}
	s.auth = newCallAuth(e)
	s.peers.m = make(map[xfer.ID]*xfer.Peer)
	s.peers.changed = make(chan struct{})
	rand.Read(s.id[:])
	s.ctx, s.stop = context.WithCancel(context.Background())
	for _, e := range es {
		m, err := newMsgBufs(e, serverMsgBufs, opts.Engine.MaxMessage)
		if err != nil {
			for _, m := range s.msgs {
				m.close()
			}
			s.st.disk.abandon()
			for i := len(es) - 1; i >= 0; i-- {
				es[i].Close()
			}
			return nil, err
		}
		s.msgs = append(s.msgs, m)
	}
	if opts.Metrics != nil {
		s.metrics = newServerMetrics(s)
		if err := opts.Metrics.Register(s.metrics); err != nil {
			for _, m := range s.msgs {
				m.close()
			}
			s.st.disk.abandon()
			for i := len(es) - 1; i >= 0; i-- {
				es[i].Close()
			}
			return nil, fmt.Errorf("kv: metrics: %w", err)
		}
	}
	for i, e := range es {
		s.wg.Go(func() { s.acceptLoop(e, s.msgs[i]) })
	}
	// The engines held their peers until now: the first engine's pool is
	// registered with the others, the message buffers and the accept
	// loops are in place.
	for _, e := range es {
		e.Ready()
	}
	return s, nil
}

// railsOptions maps Devices N > 1, where rdma may carry the data plane,
// onto one engine over N rails (rdma.devices): the first N of the host's
// RDMA devices (have, or why they could not be listed), unless RDMA.Device
// or RDMA.Devices already names them. That engine cuts large transfers
// over the devices and moves a failed one's operations to the others
// (docs/RDMA.md), which N engines, one per device, did not.
func railsOptions(opts ServerOptions, have []string, listErr error) (ServerOptions, error) {
	if opts.Engine.RDMA.Device != "" || len(opts.Engine.RDMA.Devices) > 0 {
		opts.Devices = 1
		return opts, nil
	}
	if listErr != nil || len(have) < opts.Devices {
		return opts, fmt.Errorf("kv: devices %d: this host has %d RDMA devices %v (%v); use --transport tcp or shm for several plain listeners", opts.Devices, len(have), have, listErr)
	}
	opts.Engine.RDMA.Devices = append([]string(nil), have[:opts.Devices]...)
	opts.Devices = 1
	return opts, nil
}

// openEngines opens the data-plane engines. The first owns the value pool;
// the others register the same memory, so any of them can move any value.
func openEngines(ctx context.Context, opts ServerOptions) ([]*xfer.Engine, error) {
	if opts.Devices < 1 {
		return nil, fmt.Errorf("kv: devices %d: must be at least 1", opts.Devices)
	}
	if opts.Devices > 1 && opts.Engine.Transport != xfer.PolicyTCP && opts.Engine.Transport != xfer.PolicySHM {
		var have []string
		devs, err := probe.Devices()
		for _, d := range devs {
			have = append(have, d.Name)
		}
		if opts, err = railsOptions(opts, have, err); err != nil {
			return nil, err
		}
	}
	var es []*xfer.Engine
	fail := func(err error) ([]*xfer.Engine, error) {
		for _, e := range es {
			e.Close()
		}
		return nil, fmt.Errorf("kv: data plane: %w", err)
	}
	for i := range opts.Devices {
		cfg := opts.Engine
		if cfg.Metrics != nil && opts.Devices > 1 {
			cfg.Metrics = prometheus.WrapRegistererWith(prometheus.Labels{"engine": strconv.Itoa(i)}, cfg.Metrics)
		}
		if i > 0 {
			cfg.MemoryMB = 1 // their own pools stay unused
			// The first engine is the node in the directory; the others are
			// found through its Hello.
			cfg.Directory, cfg.NodeID = "", ""
			if host, _, err := net.SplitHostPort(cfg.Listen); err == nil {
				cfg.Listen = net.JoinHostPort(host, "0")
			}
		}
		cfg.HoldPeers = true // until NewServer is done (NewServer calls Ready)
		e, err := xfer.Open(ctx, cfg)
		if err != nil {
			return fail(err)
		}
		es = append(es, e)
		if i > 0 {
			if _, err := e.Register(es[0].DefaultRegion().Bytes(), xfer.AccessReadWrite); err != nil {
				return fail(err)
			}
		}
	}
	return es, nil
}

// semanticDefaults applies the defaults of the options of leases, pins and
// eviction, and refuses values out of range.
func semanticDefaults(o *ServerOptions) error {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.SoftPinTTL == 0 {
		o.SoftPinTTL = DefaultSoftPinTTL
	}
	if o.MaxSoftPinTTL == 0 {
		o.MaxSoftPinTTL = DefaultMaxSoftPinTTL
	}
	switch {
	case o.SoftPinTTL < 0 || o.MaxSoftPinTTL < 0:
		return fmt.Errorf("kv: soft pin TTL %v and its maximum %v must not be negative", o.SoftPinTTL, o.MaxSoftPinTTL)
	case o.SoftPinTTL > o.MaxSoftPinTTL:
		return fmt.Errorf("kv: soft pin TTL %v is longer than its maximum %v", o.SoftPinTTL, o.MaxSoftPinTTL)
	}
	if o.HighWatermark == 0 {
		o.HighWatermark = DefaultHighWatermark
	}
	if !(o.HighWatermark > 0 && o.HighWatermark <= 1) { // NaN too
		return fmt.Errorf("kv: high watermark %v: must be above 0 and at most 1", o.HighWatermark)
	}
	switch {
	case o.EvictionRatio == 0:
		o.EvictionRatio = DefaultEvictionRatio
	case o.EvictionRatio < 0:
		o.EvictionRatio = 0
	case !(o.EvictionRatio <= 1):
		return fmt.Errorf("kv: eviction ratio %v: must be at most 1", o.EvictionRatio)
	}
	return nil
}
