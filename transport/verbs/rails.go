package verbs

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Rails: a transport whose Config names several devices (Config.Devices)
// is a set of single-device transports, one per device (those on the
// process's NUMA node first, railOrder), and connects a peer over each
// rail both sides have, paired by reachability (railZero, pairRails: same
// GID type, the most network bits shared, else by index); the best pair
// is rail 0. Rail 0 is the handshaken connection's; each other rail gets
// an extra TCP connection of the engine's (DialExtra, AcceptExtra) for its
// own control stream, and its own queue pairs, registrations and rkeys.
// See RailEndpoint for how operations are spread, and railrejoin.go for
// how a live connection takes a failed rail back.

// rails is the state of a Transport over several devices.
type rails struct {
	cfg  Config
	once sync.Once
	err  error // listing the devices (auto)

	mu   sync.Mutex
	subs []*Transport // one per device, in the configured order
	log  *slog.Logger

	closed bool
	stop   chan struct{} // closed by close: the probes end
	probes sync.WaitGroup

	// unusable is the error last logged for each configured device that
	// up left out (by name); a device that opens again leaves the map.
	unusable map[string]string

	// memNodes caches the NUMA node of each registered region's memory
	// (*mem.Handle → int; -1: unknown), for the rails' per-buffer
	// preference (RailEndpoint.nodeOf).
	memNodes sync.Map
}

// resolve builds the per-device transports once: the names configured,
// or for auto every device the host has (Available leaves out those
// without an ACTIVE port), those on the process's NUMA node first
// (railOrder).
func (r *rails) resolve() ([]*Transport, error) {
	r.once.Do(func() {
		names := r.cfg.Devices
		if len(names) == 1 && names[0] == autoDevices {
			devs, err := ibv.Devices()
			if err != nil {
				r.err = fmt.Errorf("rdma: %w: list the devices for %sdevices auto: %w", transport.ErrNotSupported, keyPrefix, err)
				return
			}
			names = names[:0:0]
			for _, d := range devs {
				names = append(names, d.Name)
			}
			if len(names) > wire.MaxRails {
				names = names[:wire.MaxRails]
			}
		}
		// Devices on the NUMA node the process runs on go first.
		cpus, _ := sys.AllowedCPUs()
		names, nodes := railOrder(sysRoot, names, cpus)
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, n := range names {
			c := r.cfg.Clone()
			c.Device, c.Devices = n, nil
			t := New(c, r.log)
			t.numaNode = nodes[i]
			r.subs = append(r.subs, t)
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subs, r.err
}

// up returns the devices usable now, in order, or why there is none. A
// device that was removed and is back opens again here (Transport.device),
// so a rail that failed comes back for the connections made after it
// returned.
func (r *rails) up() ([]*Transport, error) {
	subs, err := r.resolve()
	if err != nil {
		return nil, err
	}
	var ups []*Transport
	var errs []error
	for _, t := range subs {
		err := t.Available()
		r.noteUsable(t.cfg.Device, err, len(subs))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ups = append(ups, t)
	}
	if len(ups) == 0 {
		if len(errs) == 0 {
			return nil, fmt.Errorf("rdma: %w: %sdevices auto: the host has no RDMA device", transport.ErrNotSupported, keyPrefix)
		}
		return nil, fmt.Errorf("rdma: none of the %d configured devices is usable: %w", len(subs), errors.Join(errs...))
	}
	return ups, nil
}

// noteUsable logs, once per device and error, that a device of the rails
// is left out of the connections made now (and, at Info, when it is
// usable again): otherwise a peer connected over fewer rails than
// configured would say nothing of it.
func (r *rails) noteUsable(dev string, err error, of int) {
	r.mu.Lock()
	last, was := r.unusable[dev]
	log := r.log
	switch {
	case err != nil && (!was || last != err.Error()):
		if r.unusable == nil {
			r.unusable = make(map[string]string)
		}
		r.unusable[dev] = err.Error()
	case err == nil && was:
		delete(r.unusable, dev)
	default:
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	if log == nil {
		log = slog.Default()
	}
	if err != nil {
		log.Warn("rdma: a rail's device is not usable: peers connect without it", "device", dev, "rails", of, "err", err)
	} else {
		log.Info("rdma: a rail's device is usable again", "device", dev)
	}
}

func (r *rails) available() error {
	_, err := r.up()
	return err
}

// localBlob is the first usable device's description, with the number of
// rails this side offers.
func (r *rails) localBlob() []byte {
	ups, err := r.up()
	if err != nil {
		return nil
	}
	var gids [][16]byte
	for _, t := range ups[1:] {
		d, err := t.device()
		if err != nil {
			return ups[0].blob(nil) // gone meanwhile: offer one rail
		}
		gids = append(gids, d.localInfo().GID)
	}
	return ups[0].blob(gids)
}

func (r *rails) usable(local, remote transport.PeerInfo) error {
	ups, err := r.up()
	if err != nil {
		return err
	}
	return ups[0].Usable(local, remote)
}

func (r *rails) regionRemoved(h *mem.Handle) {
	r.memNodes.Delete(h)
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	for _, t := range subs {
		t.RegionRemoved(h)
	}
}

func (r *rails) close() {
	r.mu.Lock()
	subs := r.subs
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	r.mu.Unlock()
	r.probes.Wait()
	for _, t := range subs {
		t.Close()
	}
}

func (r *rails) inUse() (DeviceInUse, bool) {
	r.mu.Lock()
	subs := r.subs
	r.mu.Unlock()
	for _, t := range subs {
		if d, ok := t.inUse(); ok {
			return d, true
		}
	}
	return DeviceInUse{}, false
}

// railStatus describes each device of a transport over several
// (Config.Devices), nil for one over one device. It opens none.
func (t *Transport) railStatus() []transport.RailStatus {
	if t.rails == nil {
		return nil
	}
	t.rails.mu.Lock()
	subs := t.rails.subs
	t.rails.mu.Unlock()
	out := make([]transport.RailStatus, len(subs))
	for i, s := range subs {
		_, up := s.inUse()
		out[i] = transport.RailStatus{Device: s.cfg.Device, Up: up, Down: s.railDown.Load(), Repeated: s.railRepeated.Load(), Ops: s.railOps.Load(),
			NUMANode: s.numaNode}
	}
	return out
}

// probe tries, with backoff, to open again the device of a rail that
// failed, so that it shows up again in the status when it is back (and
// connections made later use it; live ones ask for it themselves, see
// rejoinLoop), until the transport closes.
func (r *rails) probe(t *Transport) {
	if !t.probing.CompareAndSwap(false, true) {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		t.probing.Store(false)
		return
	}
	r.probes.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.probes.Done()
		defer t.probing.Store(false)
		for wait := probeFirst; ; wait = min(2*wait, probeMax) {
			select {
			case <-r.stop:
				return
			case <-time.After(wait):
			}
			if t.Available() == nil {
				r.mu.Lock()
				log := r.log
				r.mu.Unlock()
				if log != nil {
					log.Info("rdma rail back: its device is usable again; new connections use it, live ones take it back", "device", t.cfg.Device)
				}
				return
			}
		}
	}()
}

// The probe's backoff: the first try a second after the rail failed (the
// kernel's removal of its device must have finished), then each twice
// the last, up to probeMax.
const (
	probeFirst = time.Second
	probeMax   = 30 * time.Second
)
