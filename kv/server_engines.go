package kv

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/probe"
)

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
