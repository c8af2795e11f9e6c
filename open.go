package xfer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/handshake"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Open starts an engine: it maps and registers the default pool, and starts
// listening when cfg.Listen is set.
func Open(ctx context.Context, cfg Config) (_ *Engine, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		log:      cfg.Logger,
		dialed:   map[string]*Peer{},
		peers:    map[*Peer]struct{}{},
		joins:    map[[16]byte]chan net.Conn{},
		resumes:  map[[16]byte]*Peer{},
		accepted: make(chan *Peer, 1024),
		ready:    make(chan struct{}),
	}
	e.allowedPeers, _ = parseAllowedPeers(cfg.Security.AllowedPeers) // checked by withDefaults
	e.pending = admit.New(admit.Config{Max: cfg.Security.MaxPendingHandshakes, PerSource: cfg.Security.MaxPendingPerSource})
	e.notes.Init()
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if _, err := rand.Read(e.id[:]); err != nil {
		return nil, err
	}
	e.hostID = handshake.HostID()
	e.transports = make(map[string]transport.Transport, len(transportTable)+1)
	for _, r := range transportTable {
		e.transports[r.name] = r.open(&cfg)
	}
	defer func() {
		if err != nil { // release what the transports opened (shm's probe memfd, an rdma device)
			e.cancel()
			for _, t := range e.transports {
				if c, ok := t.(io.Closer); ok {
					c.Close()
				}
			}
		}
	}()
	extra := "" // the name of Config.ExtraTransport's transport, if any
	if cfg.ExtraTransport != nil {
		t := cfg.ExtraTransport()
		if e.transports[t.Name()] != nil {
			return nil, fmt.Errorf("open: extra transport %q: the name of a transport this build has", t.Name())
		}
		e.transports[t.Name()] = t
		extra = t.Name()
	}
	e.negotiate = e.newNegotiate(extra)
	if cfg.Transport != PolicyAuto && cfg.Transport != PolicyTCP {
		// A policy that names one transport other than tcp (which is
		// always there) fails now, not at the first Dial.
		if err := e.transports[string(cfg.Transport)].Available(); err != nil {
			return nil, fmt.Errorf("open: transport %s: %w", cfg.Transport, err)
		}
	}
	var mr *mem.Region
	if cfg.MemoryDevice.IsHost() {
		mr, err = mem.NewRegion(mem.RegionOptions{
			Size:      cfg.MemoryMB << 20,
			HugePages: cfg.HugePages,
			Shared:    cfg.sharedMemory(),
			Name:      "xfer-pool",
		})
	} else {
		mr, err = e.newDevicePool(cfg.MemoryDevice.Device, cfg.MemoryMB<<20)
	}
	if err != nil {
		return nil, fmt.Errorf("open: pool of %d MiB (memory_mb) in %s memory: %w", cfg.MemoryMB, cfg.MemoryDevice, err)
	}
	if e.region, err = e.addRegion(mr, AccessReadWrite, nil); err != nil {
		mr.Close()
		return nil, err
	}
	if e.pool, err = mem.NewPool(mr, mem.PoolOptions{}); err != nil {
		e.region.Close()
		return nil, err
	}
	if cfg.Metrics != nil {
		if e.metrics, err = newEngineMetrics(e, cfg.Metrics); err != nil {
			e.pool.Close()
			e.region.Close()
			return nil, fmt.Errorf("open: metrics: %w", err)
		}
	}
	if cfg.Listen != "" {
		lc := net.ListenConfig{Control: e.listenControl}
		ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
		if err != nil {
			if e.metrics != nil {
				e.metrics.Unregister(cfg.Metrics)
			}
			e.region.Close()
			return nil, fmt.Errorf("open: listen: %w", err)
		}
		e.ln = ln
		e.addr = ln.Addr().String()
		if cfg.Advertise != "" {
			e.addr = cfg.Advertise
		}
		e.wg.Add(1)
		go e.acceptLoop()
	}
	e.checkNamedDevices()
	if cfg.OpTimeout > 0 {
		e.wg.Add(1)
		go e.watchdog()
	}
	if err := e.openNode(ctx); err != nil {
		e.Close()
		return nil, err
	}
	if !cfg.HoldPeers {
		e.Ready()
	}
	return e, nil
}

// Close closes every peer (their operations in flight fail with an error
// matching ErrClosed), stops listening, deregisters and unmaps all memory,
// and waits for every goroutine the engine started. Idempotent.
func (e *Engine) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	peers := make([]*Peer, 0, len(e.peers))
	for p := range e.peers {
		peers = append(peers, p)
	}
	e.mu.Unlock()
	// Leave the directory first, so that no one looks this engine up
	// while it closes.
	errs := []error{e.closeNode()}
	e.cancel()
	if e.ln != nil {
		errs = append(errs, e.ln.Close())
	}
	for _, p := range peers {
		p.Close()
	}
	e.wg.Wait()
	e.notes.Close()
	if e.metrics != nil {
		e.metrics.Unregister(e.cfg.Metrics)
	}
	errs = append(errs, e.closeStaging(), e.pool.Close(), e.closeRegions(), e.closeGPU())
	for _, t := range e.transports {
		if c, ok := t.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	if err := errors.Join(errs...); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// checkNamedDevices warns, under the auto policy, of each transport whose
// configured device cannot be opened: auto goes on without it, but a
// device named on purpose and not used is worth a warning and a fallback
// (reason unavailable), not silence. Under a policy that names the
// transport, Open fails instead.
func (e *Engine) checkNamedDevices() {
	if e.cfg.Transport != PolicyAuto {
		return
	}
	for _, r := range transportTable {
		if r.device == nil {
			continue
		}
		dev := r.device(&e.cfg)
		if dev == "" {
			continue
		}
		if err := e.transports[r.name].Available(); err != nil {
			e.fellBack("", r.name, metrics.ReasonUnavailable, err.Error(), "the configured device cannot be used; the auto policy goes on without "+r.name,
				"device", dev, "reason", err)
		}
	}
}
