package verbs

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// device is one opened RDMA device and port, shared by every endpoint of
// the transport: the protection domain and the registration cache live
// here, so a region is registered once, not per transfer or per peer.
type device struct {
	ctx      *ibv.Context
	pd       *ibv.PD
	info     ibv.DeviceInfo
	port     ibv.PortInfo
	gid      ibv.GIDInfo
	mtu      int
	iwarp    bool
	ethernet bool

	// With rdma_cm (iWARP, or rdma_use_cm), connections are set up by the
	// kernel's rdma_cm, addressed by the device's IP address, for QPs of
	// the device's own context (see rdmacm.Channel).
	useCM bool
	ip    netip.Addr

	mu sync.Mutex
	// mrs are the registrations of the engine's regions on this device,
	// made on first use, whole, and dropped when the engine deregisters the
	// region (Transport.RegionRemoved).
	mrs map[*mem.Handle]*ibv.MR
	// dmabufs are the DMA-BUF descriptors behind the registrations of GPU
	// regions, closed after their MRs.
	dmabufs map[*mem.Handle]int
	// gpu holds the GPUs' contexts (DMA-BUF exports); gpuHow is how GPU
	// memory was last registered (gpu.go).
	gpu     mem.DeviceSet
	gpuMu   sync.Mutex
	gpuHow  string
	gpuSeen map[string]bool // the ways logged already
	log     *slog.Logger    // nil: no logging
	// eps are the endpoints on the device, connecting or connected; gone
	// is set once the device is being removed.
	eps map[*Endpoint]*epState
	// cqs are the device's completion queues and their pollers (cq.go).
	cqMu       sync.Mutex
	cqs        []*cqGroup
	gone       error
	goneAt     time.Time      // when gone was set
	connecting sync.WaitGroup // Connect calls in progress

	// watch hears of the device's removal (see watchRemoval).
	watch    *rdmacm.RemovalWatch
	stop     chan struct{} // closed by close: ends the watcher
	watching sync.WaitGroup
	closing  sync.Once
	freed    sync.Once
}

// epState is what the device knows of one of its endpoints.
type epState struct {
	cancel context.CancelFunc // ends its Connect
	up     bool               // connected: Connect returned it
}

// selectDevice picks the device, port and GID index: the configured device,
// else the first with an ACTIVE port; on RoCE the GID index prefers RoCE v2
// IPv4-mapped entries and never takes a link-local GID, which does not
// route.
func selectDevice(cfg Config) (ibv.DeviceInfo, ibv.PortInfo, ibv.GIDInfo, error) {
	if err := ibv.Load(); err != nil {
		return ibv.DeviceInfo{}, ibv.PortInfo{}, ibv.GIDInfo{}, fmt.Errorf("rdma: %w", err)
	}
	devs, err := ibv.Devices()
	if err != nil {
		return ibv.DeviceInfo{}, ibv.PortInfo{}, ibv.GIDInfo{}, fmt.Errorf("rdma: %w: listing devices: %v", transport.ErrNotSupported, err)
	}
	if len(devs) == 0 {
		return ibv.DeviceInfo{}, ibv.PortInfo{}, ibv.GIDInfo{}, fmt.Errorf("rdma: %w: no RDMA devices (ibv_devices lists none); for SoftRoCE: rdma link add rxe0 type rxe netdev IF", transport.ErrNotSupported)
	}
	want := cfg.Device
	var reasons []string
	for _, d := range devs {
		if want != "" && d.Name != want {
			continue
		}
		for _, p := range d.Ports {
			if cfg.Port != 0 && p.Num != cfg.Port {
				continue
			}
			if p.State != "ACTIVE" {
				reasons = append(reasons, fmt.Sprintf("%s port %d is %s", d.Name, p.Num, p.State))
				continue
			}
			g, err := pickGID(d, p, cfg.GIDIndex.orAuto())
			if err != nil {
				reasons = append(reasons, err.Error())
				continue
			}
			return d, p, g, nil
		}
	}
	if want != "" && len(reasons) == 0 {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		return ibv.DeviceInfo{}, ibv.PortInfo{}, ibv.GIDInfo{}, fmt.Errorf("rdma: %w: device %q not found (devices: %s)", transport.ErrNotSupported, want, strings.Join(names, ", "))
	}
	return ibv.DeviceInfo{}, ibv.PortInfo{}, ibv.GIDInfo{}, fmt.Errorf("rdma: %w: no usable port: %s", transport.ErrNotSupported, strings.Join(reasons, "; "))
}

func pickGID(d ibv.DeviceInfo, p ibv.PortInfo, index int) (ibv.GIDInfo, error) {
	if index >= 0 {
		for _, g := range p.GIDs {
			if g.Index == index {
				return g, nil
			}
		}
		return ibv.GIDInfo{}, fmt.Errorf("%s port %d has no GID at index %d", d.Name, p.Num, index)
	}
	if p.LinkLayer != "Ethernet" {
		// InfiniBand routes by LID inside a subnet; GID 0 is the port GID.
		for _, g := range p.GIDs {
			if g.Index == 0 {
				return g, nil
			}
		}
		if len(p.GIDs) > 0 {
			return p.GIDs[0], nil
		}
		return ibv.GIDInfo{}, nil
	}
	if len(p.GIDs) == 0 {
		return ibv.GIDInfo{}, fmt.Errorf("%s port %d has no GIDs: is its netdev up?", d.Name, p.Num)
	}
	cands := append([]ibv.GIDInfo(nil), p.GIDs...)
	rank := func(g ibv.GIDInfo) int {
		switch {
		case g.LinkLocal:
			return 100 // never: link-local GIDs do not route
		case g.Type == "RoCE v2" && g.IPv4Mapped:
			return 0
		case g.Type == "RoCE v2":
			return 1
		case g.IPv4Mapped:
			return 2
		default:
			return 3
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return rank(cands[i]) < rank(cands[j]) })
	if rank(cands[0]) == 100 {
		return ibv.GIDInfo{}, fmt.Errorf("%s port %d has only link-local GIDs, which do not route: give its netdev an IP address", d.Name, p.Num)
	}
	return cands[0], nil
}

// deviceIP is the IP address of the netdev behind GID g: rdma_cm addresses
// devices by IP.
func deviceIP(name string, g ibv.GIDInfo) (netip.Addr, error) {
	if g.IPv4Mapped {
		a := netip.AddrFrom16(g.GID).Unmap()
		return a, nil
	}
	if g.Netdev == "" {
		g.Netdev = netdevOf(name, g)
	}
	if g.Netdev == "" {
		return netip.Addr{}, fmt.Errorf("%w: no network device found for GID %d, so rdma_cm cannot address it", transport.ErrNotSupported, g.Index)
	}
	ifi, err := net.InterfaceByName(g.Netdev)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: netdev %s: %v", transport.ErrNotSupported, g.Netdev, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: netdev %s: %v", transport.ErrNotSupported, g.Netdev, err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr()
		if ip.Is4() {
			return ip, nil
		}
		if !ip.IsLinkLocalUnicast() && !v6.IsValid() {
			v6 = ip
		}
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, fmt.Errorf("%w: netdev %s has no IP address; rdma_cm needs one: ip addr add ADDR/PREFIX dev %s", transport.ErrNotSupported, g.Netdev, g.Netdev)
}

// free releases the registrations, the protection domain and the context,
// once. Endpoints must have released their resources first.
func (d *device) free() {
	d.freed.Do(func() {
		d.mu.Lock()
		if d.gone == nil {
			d.gone = fmt.Errorf("rdma device %s closed", d.info.Name)
		}
		mrs, dmabufs := d.mrs, d.dmabufs
		d.mrs, d.dmabufs = nil, nil
		d.mu.Unlock()
		for _, mr := range mrs {
			mr.Close()
		}
		for _, fd := range dmabufs {
			sys.Close(fd)
		}
		d.gpu.Close()
		if d.pd != nil {
			d.pd.Close()
		}
		d.ctx.Close()
	})
}

// removedAt is when the device was taken down (zero while it was not).
func (d *device) removedAt() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.goneAt
}

// removed reports whether the device is gone (removed or closed).
func (d *device) removed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gone != nil
}

// enter registers an endpoint that starts to connect on the device.
func (d *device) enter(e *Endpoint, cancel context.CancelFunc) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone != nil {
		return &transport.LinkError{Peer: "rdma peer", Cause: d.gone}
	}
	d.eps[e] = &epState{cancel: cancel}
	d.connecting.Add(1)
	return nil
}

// connected marks e connected, unless the device went away meanwhile.
func (d *device) connected(e *Endpoint) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone != nil {
		return &transport.LinkError{Peer: "rdma peer", Cause: d.gone}
	}
	d.eps[e].up = true
	return nil
}

// leave forgets an endpoint that closed or failed to connect.
func (d *device) leave(e *Endpoint) {
	d.mu.Lock()
	delete(d.eps, e)
	d.mu.Unlock()
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// localInfo is this side's VerbsInfo, without QPs.
func (d *device) localInfo() wire.VerbsInfo {
	v := wire.VerbsInfo{Device: d.info.Name, Port: uint8(d.port.Num), GIDIndex: uint8(d.gid.Index),
		MTU: uint16(d.mtu), LID: d.port.LID, GID: d.gid.GID, LinkLayer: wire.LinkIB, CM: d.useCM}
	if d.useCM {
		v.IP = d.ip.As16()
	}
	if d.ethernet {
		v.LinkLayer = wire.LinkEthernet
	}
	return v
}

// netdevOf finds the network device under an RDMA device when the GID table
// does not name it (iWARP): the software drivers' "parent" attribute, else
// the interface whose MAC address the GID starts with (an iWARP GID is the
// MAC address, zero-padded).
func netdevOf(name string, g ibv.GIDInfo) string {
	if b, err := os.ReadFile("/sys/class/infiniband/" + name + "/parent"); err == nil {
		if n := strings.TrimSpace(string(b)); n != "" {
			if _, err := net.InterfaceByName(n); err == nil {
				return n
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if len(ifi.HardwareAddr) == 6 && string(ifi.HardwareAddr) == string(g.GID[:6]) {
			return ifi.Name
		}
	}
	return ""
}
