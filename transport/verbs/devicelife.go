package verbs

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/transport"
)

func openDevice(cfg Config) (_ *device, err error) {
	d, p, g, err := selectDevice(cfg)
	if err != nil {
		return nil, err
	}
	// max_sge becomes each QP's max_send_sge: a device that allows fewer
	// would refuse the QP at connect time, so say so now, by name.
	if d.MaxSGE > 0 && cfg.MaxSGE > d.MaxSGE {
		return nil, fmt.Errorf("rdma: %w: %smax_sge %d: %s allows at most %d scatter-gather entries per work request (ibv_devinfo -v: max_sge): set max_sge to %d or less",
			transport.ErrNotSupported, keyPrefix, cfg.MaxSGE, d.Name, d.MaxSGE, d.MaxSGE)
	}
	mtu := p.ActiveMTU
	if cfg.MTU != 0 && cfg.MTU < mtu {
		mtu = cfg.MTU
	}
	dev := &device{info: d, port: p, gid: g, mtu: mtu, iwarp: d.Transport == "iWARP", ethernet: p.LinkLayer == "Ethernet",
		eps: map[*Endpoint]*epState{}, stop: make(chan struct{})}
	dev.useCM = dev.iwarp || cfg.UseCM
	defer func() {
		if err != nil {
			dev.close()
		}
	}()
	if dev.ctx, err = ibv.Open(d.Name); err != nil {
		return nil, fmt.Errorf("rdma: open %s: %w", d.Name, err)
	}
	if dev.useCM {
		if dev.ip, err = deviceIP(d.Name, g); err != nil {
			return nil, fmt.Errorf("rdma: %s: %w", d.Name, err)
		}
		// The removal watch is also the check that rdma_cm reaches this
		// device by its address.
		if dev.watch, err = rdmacm.WatchRemoval(dev.ip, dev.ctx); err != nil {
			return nil, fmt.Errorf("rdma: %s needs rdma_cm on %s: %w", d.Name, dev.ip, err)
		}
	}
	if dev.pd, err = dev.ctx.AllocPD(); err != nil {
		return nil, fmt.Errorf("rdma: %s: %w", d.Name, err)
	}
	dev.startWatch()
	return dev, nil
}

// close releases the device (Transport.Close): it stops the watcher, waits
// for a removal in progress, and frees what is left.
func (d *device) close() {
	d.closing.Do(func() { close(d.stop) })
	d.watching.Wait()
	d.watch.Close()
	d.closeCQs()
	d.free()
}

// startWatch watches for the device's removal through a kernel rdma_cm ID
// bound to its IP address. Without an address (InfiniBand without IPoIB) or
// without the rdma_ucm module there is no watch; Transport.device then
// notices a removed device only once its sysfs entry is gone.
func (d *device) startWatch() {
	ip := d.ip
	if d.watch == nil {
		var err error
		if ip, err = deviceIP(d.info.Name, d.gid); err != nil {
			return
		}
		if d.watch, err = rdmacm.WatchRemoval(ip, d.ctx); err != nil {
			d.watch = nil
			return
		}
	}
	d.watching.Add(1)
	go d.watchRemoval(ip)
}

// watchRemoval waits for the kernel's removal report and takes the device
// down (see remove).
func (d *device) watchRemoval(ip netip.Addr) {
	defer func() {
		d.watch.Close()
		d.watching.Done()
	}()
	for {
		select {
		case <-d.stop:
			return
		case <-d.watch.Removed():
		}
		if !d.stillListed() {
			d.watch.Close()
			d.remove(fmt.Errorf("rdma device %s removed", d.info.Name))
			return
		}
		// Another device with the same address went away: watch again.
		d.watch.Close()
		w, err := rdmacm.WatchRemoval(ip, d.ctx)
		if err != nil {
			d.watch = nil
			return
		}
		d.watch = w
	}
}

// stillListed reports whether libibverbs still lists the device a while
// after a removal report. The kernel stops listing a device as soon as its
// unregistration starts, before rdma_cm hears of it, so the answer is
// usually immediate; polling covers kernels that list devices from sysfs.
func (d *device) stillListed() bool {
	deadline := time.Now().Add(5 * time.Second)
	for {
		names, err := ibv.DeviceNames()
		if err == nil && !slices.Contains(names, d.info.Name) {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		select {
		case <-d.stop:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// remove takes a removed device down so that the kernel can finish
// unregistering it, which it does only once every handle on it is closed:
// every endpoint fails with cause (operations in flight, and new ones, get
// a link error, and the engine's peers dial again, over another transport
// under auto), Connect calls in progress are cancelled, and the QPs, CQs,
// completion channels, receive rings, registrations, protection domain and
// context are released. The registered memory itself stays: only the
// device's registrations of it go.
func (d *device) remove(cause error) {
	d.mu.Lock()
	if d.gone != nil {
		d.mu.Unlock()
		return
	}
	d.gone, d.goneAt = cause, time.Now()
	eps := make(map[*Endpoint]*epState, len(d.eps))
	for e, st := range d.eps {
		eps[e] = st
	}
	d.mu.Unlock()
	lerr := &transport.LinkError{Peer: "rdma peer", Cause: cause}
	for e, st := range eps {
		st.cancel()
		if st.up {
			e.pathFailed(lerr) // the endpoint may carry on over its stream
		}
	}
	d.connecting.Wait()
	for e, st := range eps {
		if st.up {
			e.release()
		}
	}
	d.closeCQs()
	d.free()
}
