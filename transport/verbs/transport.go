package verbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stream"
)

// Transport is the rdma transport.
type Transport struct {
	cfg Config
	err error // cfg's validation error: the transport is not available

	mu  sync.Mutex
	dev *device
	old []*device // removed devices, closed with the transport
	// leaving is the device last taken down as removed, while its sysfs
	// entry may still be listed: the kernel lists a device until its
	// removal finishes, and opening it again then would hand out a device
	// that is going away.
	leaving   string
	leavingAt time.Time
	log       *slog.Logger // set by New, never changed

	rails *rails // several devices (Config.Devices); nil for one

	// A rail's counts, on the transport of each device of rails: the
	// times it was taken down under a live endpoint, the operations then
	// repeated on another rail, the operations (or pieces) completed on
	// it; and whether its probe runs.
	railDown, railRepeated, railOps atomic.Uint64
	probing                         atomic.Bool
	numaNode                        int // of its device, as a rail; -1: unknown
}

// leaveGrace bounds how long a removed device that is still listed is not
// opened again: past it, a device of that name is taken to be a new one
// (added again before this transport saw the old one's entry go).
const leaveGrace = 10 * time.Second

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Registrar = (*Transport)(nil)
)

// New returns the rdma transport configured by cfg, with its defaults
// filled in. Nothing is opened until it is used. An invalid cfg (see
// Config.WithDefaults) makes the transport unavailable: Available and
// Connect return the error, which names the key. log receives what the
// transport decides on its own, outside any endpoint (how a device
// registers GPU memory, a rail left out); nil: it logs nothing of the
// first, and the rails log to slog's default.
func New(cfg Config, log *slog.Logger) *Transport {
	cfg, err := cfg.WithDefaults()
	t := &Transport{cfg: cfg, err: err, log: log}
	if err == nil && len(cfg.Devices) > 0 {
		t.rails = &rails{cfg: cfg, stop: make(chan struct{}), log: log}
	}
	return t
}

// Name is "rdma".
func (*Transport) Name() string { return "rdma" }

// Caps is what rdma can do: it moves host memory, and GPU memory where
// the NIC reaches it (DMA-BUF, nvidia-peermem), and each memory
// registration grants the region's rights, no more, so the NIC keeps the
// peer to them.
var Caps = transport.Caps{
	Memory: mem.KindSet(mem.KindHost, mem.KindCUDA),
	Rights: transport.RightsByNIC,
}

// Caps returns the package's Caps.
func (*Transport) Caps() transport.Caps { return Caps }

// device opens the device on first use, and again when the one it had is
// gone (a deleted rxe link, a hot-unplugged NIC): until then the transport
// is not available, and the engine's auto policy picks another one.
func (t *Transport) device() (*device, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.dev; d != nil {
		if !d.removed() {
			if _, err := os.Stat("/sys/class/infiniband/" + d.info.Name); err == nil {
				return d, nil
			}
			// Gone without the watcher noticing (no IP address to watch
			// it by): take it down now.
			d.watching.Add(1)
			go func() {
				defer d.watching.Done()
				d.remove(fmt.Errorf("rdma device %s removed", d.info.Name))
			}()
		}
		t.old = append(t.old, d)
		t.dev = nil
		t.leaving, t.leavingAt = d.info.Name, time.Now()
		if at := d.removedAt(); !at.IsZero() {
			t.leaving, t.leavingAt = d.info.Name, at
		}
	}
	if t.err != nil {
		return nil, t.err
	}
	if t.leaving != "" {
		_, err := os.Stat("/sys/class/infiniband/" + t.leaving)
		if err == nil && time.Since(t.leavingAt) < leaveGrace {
			return nil, fmt.Errorf("rdma: %w: device %s is being removed", transport.ErrNotSupported, t.leaving)
		}
		t.leaving = ""
	}
	d, err := openDevice(t.cfg)
	if err != nil {
		return nil, err
	}
	d.log = t.log
	if d.log != nil {
		d.log.Info("rdma: what makes the NIC enforce a grant (a sub-range of a region) on this device", "device", d.info.Name, "grants", grantEnforcement(d.info))
	}
	t.dev = d
	return d, nil
}

// Available reports whether a usable device and port exist.
func (t *Transport) Available() error {
	if t.rails != nil {
		return t.rails.available()
	}
	d, err := t.device()
	if err != nil {
		return err
	}
	_ = d
	return nil
}

// LocalBlob describes this side's device for the peer's Usable.
func (t *Transport) LocalBlob() []byte {
	if t.rails != nil {
		return t.rails.localBlob()
	}
	return t.blob(nil)
}

// blob is the device's description for the handshake, with the GIDs of
// the other rails this side offers (none: one device).
func (t *Transport) blob(railGIDs [][16]byte) []byte {
	d, err := t.device()
	if err != nil {
		return nil
	}
	v := d.localInfo()
	v.RailGIDs = railGIDs
	return wire.AppendVerbsInfo(nil, &v)[wire.HandshakeHeaderLen:]
}

// Usable checks that both sides are on compatible fabrics.
func (t *Transport) Usable(local, remote transport.PeerInfo) error {
	if t.rails != nil {
		return t.rails.usable(local, remote)
	}
	if err := t.Available(); err != nil {
		return err
	}
	r, err := wire.DecodeVerbsInfo(remote.Blob)
	if err != nil {
		return fmt.Errorf("rdma: %w: peer's device description: %v", transport.ErrNotSupported, err)
	}
	d, _ := t.device()
	l := d.localInfo()
	if l.LinkLayer != r.LinkLayer {
		return fmt.Errorf("rdma: %w: link layers differ: %s here, %s on the peer", transport.ErrNotSupported, linkName(l.LinkLayer), linkName(r.LinkLayer))
	}
	// A device whose completion queues are full cannot take the peer: an
	// error matching transport.ErrNoRoom has the acceptor choose the next
	// transport. The peer's receive depth is not known yet: the most it
	// may be (rdma_max_recv_wr) bounds what it needs.
	if err := d.cqRoom(cqNeed(t.cfg, d.iwarp, t.cfg.MaxRecvWR)); err != nil {
		return fmt.Errorf("rdma: %w", err)
	}
	return nil
}

func linkName(l uint8) string {
	if l == wire.LinkEthernet {
		return "Ethernet (RoCE)"
	}
	return "InfiniBand"
}

// RegionAdded implements transport.Registrar. It registers nothing: a
// region is registered with the device on first use (an operation from it,
// a peer's attach, the rkeys of the exports), whole, so that regions rdma
// never touches cost no pinned memory and no registration time.
func (t *Transport) RegionAdded(*mem.Handle) {}

// RegionRemoved implements transport.Registrar: it deregisters region h, if
// it was registered, before the engine unmaps it.
func (t *Transport) RegionRemoved(h *mem.Handle) {
	if t.rails != nil {
		t.rails.regionRemoved(h)
		return
	}
	t.mu.Lock()
	d := t.dev
	t.mu.Unlock()
	if d != nil {
		d.forget(h)
	}
}

// connectOne is Connect over the transport's one device.
func (t *Transport) connectOne(ctx context.Context, p transport.Params) (*Endpoint, error) {
	d, err := t.device()
	if err != nil {
		p.Conn.Close()
		return nil, err
	}
	// The device's removal cancels the connection setup.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e := &Endpoint{dev: d, cfg: t.cfg, att: map[uint32]*remote{}, byQPN: map[uint32]int{}, done: make(chan struct{}), maxMessage: p.MaxMessage, host: p.Host,
		onFailover: p.OnFailover}
	if err := d.enter(e, cancel); err != nil {
		p.Conn.Close()
		return nil, fmt.Errorf("rdma: %w", err)
	}
	defer d.connecting.Done()
	if _, err := e.connect(ctx, p); err != nil {
		d.leave(e)
		return nil, err
	}
	if err := d.connected(e); err != nil {
		e.Close()
		return nil, fmt.Errorf("rdma: %w", err)
	}
	return e, nil
}

// connect brings the endpoint up: its CQ, receive ring, QPs connected to the
// peer's, control stream and poller.
func (e *Endpoint) connect(ctx context.Context, p transport.Params) (ep transport.Endpoint, err error) {
	d, cfg := e.dev, e.cfg
	defer func() {
		if err != nil {
			p.Conn.Close()
			e.releasePartial()
		}
	}()
	depth := min(p.RecvDepth, cfg.MaxRecvWR)
	e.depth = depth
	e.noImm = d.iwarp
	if e.noImm {
		// Notifications travel as inline messages on a QP of their own.
		e.cfg.QPsPerPeer = max(2, e.cfg.QPsPerPeer)
	}
	// The device's CQ the QPs complete on: room for every request their
	// send and receive queues (or the shared receive queue) can hold.
	need := cqNeed(cfg, d.iwarp, depth)
	if err = d.joinCQ(e, need); err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	e.slotSize = max(p.MaxMessage, 64)
	// One slot more than the depth: the scratch buffer of the notify-only
	// receives (some providers, siw among them, refuse receives without a
	// buffer).
	e.ringSlots = depth
	if cfg.UseSRQ {
		e.ringSlots = depth * max(2, cfg.QPsPerPeer)
	}
	if e.ring, err = mem.NewRegion(mem.RegionOptions{Size: e.ringSlots*e.slotSize + depth*noteSlot + 64 + appendLen(e.slotSize)}); err != nil {
		return nil, fmt.Errorf("rdma: receive ring: %w", err)
	}
	if e.ringMR, err = d.pd.RegMR(e.ring.Bytes(), ibv.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rdma: register receive ring of %d KiB on %s: %w%s", depth*e.slotSize>>10, d.info.Name, err, memlockHint(err))
	}
	e.initAppend(e.fenceOff()+64, e.slotSize)
	local := d.localInfo()
	local.RecvDepth = uint32(depth)
	if cfg.UseSRQ {
		if e.srq, err = d.pd.CreateSRQ(e.ringSlots, 1); err != nil {
			return nil, fmt.Errorf("rdma: shared receive queue on %s: %w", d.info.Name, err)
		}
		wrs := make([]ibv.RecvWR, e.ringSlots)
		for s := range wrs {
			wrs[s] = e.recvWR(uint32(s))
		}
		if err := e.srq.PostRecv(wrs); err != nil {
			return nil, fmt.Errorf("rdma: post receives: %w", err)
		}
		e.recvOut.Add(int64(len(wrs)))
	}
	peer, err := wire.DecodeVerbsInfo(p.Remote.Blob)
	if err != nil {
		return nil, fmt.Errorf("rdma: peer's device description: %w", err)
	}
	if peer.Version < wire.VerbsInfoVersionKeys {
		local.Version = peer.Version // a peer that knows no rkeys in the exchange
	} else if p.Role == transport.Acceptor {
		// The regions the Welcome advertised: their rkeys go with the QP
		// numbers, and the dialer's first access to one needs no attach.
		local.Keys = e.exportKeys(p.Host)
	}
	if local.CM || peer.CM {
		return e.connectCM(ctx, p, &local)
	}
	for i := 0; i < cfg.QPsPerPeer; i++ {
		qp, err := d.pd.CreateQP(e.qpAttr())
		if err != nil {
			return nil, fmt.Errorf("rdma: create QP %d on %s: %w", i, d.info.Name, err)
		}
		e.addQP(qp)
		var b [4]byte
		rand.Read(b[:])
		local.QPNs = append(local.QPNs, qp.Num())
		local.PSNs = append(local.PSNs, binary.LittleEndian.Uint32(b[:])&0xffffff)
		if err := qp.ToInit(d.port.Num, ibv.AccessLocalWrite|ibv.AccessRemoteWrite|ibv.AccessRemoteRead); err != nil {
			return nil, fmt.Errorf("rdma: QP to INIT on %s port %d: %w", d.info.Name, d.port.Num, err)
		}
		if err := e.postInitialRecvs(len(e.qps) - 1); err != nil {
			return nil, err
		}
	}

	remote, err := exchange(ctx, p, &local, nil)
	if err != nil {
		return nil, err
	}
	// The QPs connect to the GID the exchange names: it must be the one
	// the handshake named, which the engine checked (allowed_gids) before
	// this transport was chosen.
	if remote.GID != peer.GID {
		return nil, fmt.Errorf("rdma: %w: the peer's QP info names GID %s, its handshake GID %s", transport.ErrProtocol,
			net.IP(remote.GID[:]), net.IP(peer.GID[:]))
	}
	e.credits = int(remote.RecvDepth)
	e.seed(remote.Keys)
	n := min(len(local.QPNs), len(remote.QPNs))
	if n < len(e.qps) {
		for _, q := range e.qps[n:] {
			delete(e.byQPN, q.qp.Num())
			q.qp.Close()
		}
		e.qps = e.qps[:n]
	}
	mtu := min(int(local.MTU), int(remote.MTU))
	for i, q := range e.qps {
		rtr := ibv.RTRAttr{RemoteQPN: remote.QPNs[i], RemotePSN: remote.PSNs[i], PathMTU: mtu, DLID: remote.LID,
			IsGlobal: d.ethernet || remote.GID != [16]byte{}, DGID: remote.GID, SGIDIndex: int(local.GIDIndex), HopLimit: 64,
			Port: d.port.Num, MaxDestRdAtomic: 16, MinRNRTimer: e.cfg.MinRNRTimer}
		if err := q.qp.ToRTR(rtr); err != nil {
			return nil, rtrError(err, &local, remote, mtu)
		}
		if err := q.qp.ToRTS(ibv.RTSAttr{PSN: local.PSNs[i], Timeout: e.cfg.ACKTimeout, RetryCnt: count(e.cfg.RetryCnt), RNRRetry: count(e.cfg.RNRRetry), MaxRdAtomic: 16}); err != nil {
			return nil, fmt.Errorf("rdma: QP to RTS on %s: %w", d.info.Name, err)
		}
	}
	return e.start(ctx, p)
}

// start finishes Connect once the QPs are connected: both sides' QPs are
// ready to receive before either sends, then the control stream and the
// completion poller start.
func (e *Endpoint) start(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	if err := syncReady(ctx, p.Conn); err != nil {
		return nil, err
	}
	p.Conns = 1
	var err error
	e.s, err = stream.New(ctx, p, stream.Options{Name: "rdma", OnRevoke: e.revoked, OnAttach: e.attachKey,
		OnDown: e.controlDown, OnCredit: e.onCredit, OnPathDown: e.onPathDown})
	if err != nil {
		p.Conn = nil
		return nil, err
	}
	e.recheckKeys(p.Host)
	e.startCQ()
	return e, nil
}

// exportKeys registers the regions the engine exports and returns their
// rkeys, for the QP exchange. A region that cannot be looked up or
// registered is left out: the peer attaches it on first use, and hears why
// it fails then.
func (e *Endpoint) exportKeys(h transport.Host) []wire.RegionKey {
	x, ok := h.(transport.Exporter)
	if !ok {
		return nil
	}
	var keys []wire.RegionKey
	for _, d := range x.Exports() {
		if len(keys) == wire.MaxExports {
			break
		}
		res, err := h.Lookup(d.ID, d.Key, d.Access)
		if err != nil {
			continue // closed since it was exported
		}
		mr, err := e.dev.mr(res.Region)
		res.Release()
		if err != nil {
			continue
		}
		keys = append(keys, wire.RegionKey{ID: d.ID, Access: uint8(d.Access), Base: res.Region.Base(), Len: res.Region.Len(), Key: d.Key, RKey: mr.RKey})
	}
	e.sent = keys
	return keys
}

// recheckKeys runs once the control stream is up: a region closed between
// exportKeys and now may have missed the engine's revocation (the peer's
// endpoint was not yet current), so it is revoked here; the peer drops
// its rkey before using it.
func (e *Endpoint) recheckKeys(h transport.Host) {
	for _, k := range e.sent {
		res, err := h.Lookup(k.ID, k.Key, transport.Access(k.Access))
		if err != nil {
			e.s.Revoke(k.ID)
			continue
		}
		res.Release()
	}
	e.sent = nil
}

// seed records the rkeys the peer sent with its QP numbers, as if each
// region had been attached with the rights it grants.
func (e *Endpoint) seed(keys []wire.RegionKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range keys {
		e.att[k.ID] = &remote{base: k.Base, n: k.Len, key: k.Key, rkey: k.RKey, rights: transport.Access(k.Access)}
	}
}

// attachKey registers the region a peer asks for (once) and answers its
// rkey.
func (e *Endpoint) attachKey(res transport.Resolved, info *wire.AttachInfo) error {
	mr, err := e.dev.mr(res.Region)
	if err != nil {
		return err
	}
	info.RKey = mr.RKey
	return nil
}

func (e *Endpoint) releasePartial() {
	e.closeQPs()
	e.leaveCQ()
	if e.ringMR != nil {
		e.ringMR.Close()
	}
	if e.ring != nil {
		e.ring.Close()
	}
}

// qpAttr is the QP shape of every QP of the endpoint.
func (e *Endpoint) qpAttr() ibv.QPInitAttr {
	return ibv.QPInitAttr{SendCQ: e.cqg.cq, RecvCQ: e.cqg.cq, SRQ: e.srq, MaxSendWR: e.cfg.MaxSendWR, MaxRecvWR: e.depth,
		MaxSendSGE: e.cfg.MaxSGE, MaxRecvSGE: 1, MaxInline: e.cfg.MaxInlineData, Type: ibv.QPTypeRC}
}

// addQP adds a created QP to the endpoint.
func (e *Endpoint) addQP(qp *ibv.QP) {
	caps := qp.Caps()
	q := newSendQueue(qp, caps.MaxSendWR)
	if len(e.qps) == 0 {
		e.cfg.MaxInlineData = min(e.cfg.MaxInlineData, caps.MaxInline)
	}
	e.byQPN[qp.Num()] = len(e.qps)
	e.qps = append(e.qps, q)
}

// postInitialRecvs posts QP i's receives before the peer can send: the ring
// on the first QP, buffer-less ones (write-with-notify only) on the others.
func (e *Endpoint) postInitialRecvs(i int) error {
	if e.srq != nil {
		return nil // the shared queue is filled once
	}
	wrs := make([]ibv.RecvWR, 0, e.depth)
	for s := 0; s < e.depth; s++ {
		if i == 0 {
			wrs = append(wrs, e.recvWR(uint32(s)))
		} else {
			wrs = append(wrs, e.immRecvWR(uint32(s)))
		}
	}
	if _, err := e.qps[i].qp.PostRecv(wrs); err != nil {
		return fmt.Errorf("rdma: post receives: %w", err)
	}
	e.recvOut.Add(int64(len(wrs)))
	return nil
}

// connectCM connects the QPs through rdma_cm: the acceptor listens on its
// device's IP address and says where in its QP info; the dialer connects
// each QP there. rdma_cm takes the QPs through INIT, RTR and RTS (iWARP
// allows nothing else). The kernel's rdma_cm is used directly
// (rdmacm.Channel), never librdmacm, which would hold a verbs context of its
// own on the device and keep a removed device from going away.
func (e *Endpoint) connectCM(ctx context.Context, p transport.Params, local *wire.VerbsInfo) (transport.Endpoint, error) {
	d := e.dev
	var err error
	if e.cmCh, err = rdmacm.NewChannel(); err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	local.CM = true
	dropped := false
	listen := func(l *wire.VerbsInfo) error {
		lis, err := e.cmCh.CreateID()
		if err != nil {
			return fmt.Errorf("rdma: %w", err)
		}
		e.cmIDs = append(e.cmIDs, lis)
		if err := lis.Bind(netip.AddrPortFrom(d.ip, 0)); err != nil {
			return fmt.Errorf("rdma: rdma_cm listen on %s: %w", d.ip, err)
		}
		if err := lis.Listen(e.cfg.QPsPerPeer); err != nil {
			return fmt.Errorf("rdma: rdma_cm listen on %s: %w", d.ip, err)
		}
		l.CMPort = lis.Port()
		if testDropListener.CompareAndSwap(true, false) {
			// The dialer is told of a port nobody listens on.
			e.cmIDs = e.cmIDs[:len(e.cmIDs)-1]
			lis.Close()
			dropped = true
		}
		return nil
	}
	if p.Role == transport.Dialer {
		listen = nil
	}
	local.QPNs = make([]uint32, e.cfg.QPsPerPeer) // only the count matters here
	local.PSNs = make([]uint32, e.cfg.QPsPerPeer)
	remote, err := exchange(ctx, p, local, listen)
	if err != nil {
		return nil, err
	}
	if dropped {
		return nil, errors.New("rdma: rdma_cm listener dropped by a test")
	}
	e.credits = int(remote.RecvDepth)
	e.seed(remote.Keys)
	n := min(len(local.QPNs), len(remote.QPNs))
	if e.noImm && n < 2 {
		return nil, fmt.Errorf("rdma: %w: iWARP needs 2 queue pairs per peer (notifications travel on the second); the peer offers %d", transport.ErrNotSupported, n)
	}
	rd := min(16, max(1, d.info.MaxQPRdAtom))
	wait := func(want rdmacm.EventType) (rdmacm.Event, error) {
		ev, err := e.cmCh.WaitEvent(ctx)
		if err != nil {
			return ev, fmt.Errorf("rdma: rdma_cm: waiting for %v: %w", want, err)
		}
		if ev.Type != want {
			err := fmt.Errorf("rdma: rdma_cm: %v (%v), want %v", ev.Type, ev.Err(), want)
			if transientCMEvent(ev.Type) {
				err = fmt.Errorf("%w (%w)", err, transport.ErrTransient)
			}
			return ev, err
		}
		return ev, nil
	}
	// newQP creates QP i of the endpoint for id's connection, in INIT with
	// its receives posted.
	newQP := func(id *rdmacm.ID, i int) (*ibv.QP, error) {
		qp, err := d.pd.CreateQP(e.qpAttr())
		if err != nil {
			return nil, fmt.Errorf("rdma: create QP %d on %s: %w", i, d.info.Name, err)
		}
		e.addQP(qp)
		if err := id.InitQP(qp); err != nil {
			return nil, fmt.Errorf("rdma: %w", err)
		}
		if err := e.postInitialRecvs(i); err != nil {
			return nil, err
		}
		return qp, nil
	}
	if p.Role == transport.Dialer {
		dst := netip.AddrPortFrom(netip.AddrFrom16(remote.IP).Unmap(), remote.CMPort)
		for i := 0; i < n; i++ {
			id, err := e.cmCh.CreateID()
			if err != nil {
				return nil, fmt.Errorf("rdma: %w", err)
			}
			e.cmIDs = append(e.cmIDs, id)
			if err := id.ResolveAddrPort(dst, 5*time.Second); err != nil {
				return nil, fmt.Errorf("rdma: rdma_cm resolve %s: %w", dst, err)
			}
			if _, err := wait(rdmacm.EventAddrResolved); err != nil {
				return nil, err
			}
			if ok, err := id.OnDevice(d.ctx); err != nil || !ok {
				return nil, fmt.Errorf("rdma: %w: rdma_cm reaches %s through another device than %s (%v)", transport.ErrNotSupported, dst, d.info.Name, err)
			}
			if err := id.ResolveRoute(5 * time.Second); err != nil {
				return nil, fmt.Errorf("rdma: rdma_cm route to %s: %w", dst, err)
			}
			if _, err := wait(rdmacm.EventRouteResolved); err != nil {
				return nil, err
			}
			qp, err := newQP(id, i)
			if err != nil {
				return nil, err
			}
			id.SetRetry(e.cfg.RetryCnt, e.cfg.RNRRetry)
			if err := id.Connect(qp, []byte{'x', 'f', byte(i)}, rd); err != nil {
				err = fmt.Errorf("rdma: rdma_cm connect to %s: %w", dst, err)
				if transientConnectErr(err) {
					// siw connects the TCP stream at once, and may be refused.
					err = fmt.Errorf("%w (%w)", err, transport.ErrTransient)
				}
				return nil, err
			}
			if d.iwarp {
				if _, err := wait(rdmacm.EventEstablished); err != nil {
					return nil, err
				}
				continue
			}
			if _, err := wait(rdmacm.EventConnectResponse); err != nil {
				return nil, err
			}
			if err := id.Established(qp); err != nil {
				return nil, fmt.Errorf("rdma: %w", err)
			}
		}
	} else if err := e.acceptCM(ctx, n, rd, newQP); err != nil {
		return nil, err
	}
	return e.start(ctx, p)
}

// acceptCM accepts the dialer's n rdma_cm connections, QP 0 first, and
// waits until each is established. The events of different connections
// come in no fixed order: the dialer connects QP i+1 once its own side of
// QP i is up, and its request can arrive before this side's ESTABLISHED for
// QP i (siw does this now and then).
func (e *Endpoint) acceptCM(ctx context.Context, n, rd int, newQP func(*rdmacm.ID, int) (*ibv.QP, error)) error {
	index := map[*rdmacm.ID]int{} // accepted connection → its QP index
	up := 0
	for up < n {
		ev, err := e.cmCh.WaitEvent(ctx)
		if err != nil {
			return fmt.Errorf("rdma: rdma_cm: waiting for the dialer's connections (%d of %d up): %w", up, n, err)
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			id := ev.ID
			e.cmIDs = append(e.cmIDs, id) // closed with the endpoint, whatever happens
			i := len(index)
			if len(ev.PrivateData) < 3 || ev.PrivateData[0] != 'x' || ev.PrivateData[1] != 'f' || int(ev.PrivateData[2]) != i || i >= n {
				id.Reject(nil)
				return fmt.Errorf("rdma: %w: unexpected rdma_cm connect request (want QP %d of %d)", transport.ErrProtocol, i, n)
			}
			index[id] = i
			qp, err := newQP(id, i)
			if err != nil {
				return err
			}
			id.SetRetry(e.cfg.RetryCnt, e.cfg.RNRRetry)
			if err := id.Accept(qp, nil, rd); err != nil {
				return fmt.Errorf("rdma: %w", err)
			}
		case rdmacm.EventEstablished:
			if i, ok := index[ev.ID]; !ok || i < 0 {
				return fmt.Errorf("rdma: %w: rdma_cm established a connection this side did not accept", transport.ErrProtocol)
			}
			index[ev.ID] = -1 // up
			up++
		default:
			err := fmt.Errorf("rdma: rdma_cm: %v (%v) while accepting QP %d of %d", ev.Type, ev.Err(), up, n)
			if transientCMEvent(ev.Type) {
				err = fmt.Errorf("%w (%w)", err, transport.ErrTransient)
			}
			return err
		}
	}
	return nil
}

// transientCMEvent says whether an rdma_cm event that ends a connection
// being set up is worth a fresh attempt: the peer's CM refused it or dropped
// it, or the address or route did not resolve. On siw, a setup now and then
// ends in DISCONNECTED where ESTABLISHED was due (docs/TESTING.md).
func transientCMEvent(t rdmacm.EventType) bool {
	switch t {
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError,
		rdmacm.EventUnreachable, rdmacm.EventRejected, rdmacm.EventDisconnected:
		return true
	}
	return false
}

// transientConnectErr says whether an rdma_cm connect failed for a reason
// that a fresh attempt may not meet.
func transientConnectErr(err error) bool {
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EADDRNOTAVAIL, syscall.EADDRINUSE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// testForgeGID makes the next dialer send a GID in its QP info other than
// the one its handshake named, as a peer that tries to slip past
// allowed_gids would (tests only).
var testForgeGID atomic.Bool

// testDropListener makes the next rdma_cm acceptor close its listener before
// the dialer connects, and fail (tests only).
var testDropListener atomic.Bool

// exchange sends this side's QP description and reads the peer's: the
// dialer speaks first. The acceptor calls before (when set) between reading
// and answering.
func exchange(ctx context.Context, p transport.Params, local *wire.VerbsInfo, before func(*wire.VerbsInfo) error) (*wire.VerbsInfo, error) {
	stop := context.AfterFunc(ctx, func() { p.Conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	send := func() error {
		msg := local
		if p.Role == transport.Dialer && testForgeGID.CompareAndSwap(true, false) {
			forged := *local
			forged.GID[15] ^= 0xff
			msg = &forged
		}
		_, err := p.Conn.Write(wire.AppendVerbsInfo(nil, msg))
		return err
	}
	if p.Role == transport.Dialer {
		if err := send(); err != nil {
			return nil, fmt.Errorf("rdma: send QP info: %w", err)
		}
	}
	typ, body, err := wire.ReadMessage(p.Conn)
	if err != nil {
		return nil, fmt.Errorf("rdma: read the peer's QP info: %w", err)
	}
	if typ != wire.MsgVerbs {
		return nil, fmt.Errorf("rdma: %w: expected QP info, got message type %d", transport.ErrProtocol, typ)
	}
	remote, err := wire.DecodeVerbsInfo(body)
	if err != nil {
		return nil, fmt.Errorf("rdma: peer's QP info: %w", err)
	}
	if len(remote.QPNs) == 0 && !remote.CM && !local.CM {
		return nil, fmt.Errorf("rdma: %w: peer sent no queue pairs", transport.ErrProtocol)
	}
	if before != nil {
		if err := before(local); err != nil {
			return nil, err
		}
	}
	if p.Role == transport.Acceptor {
		if err := send(); err != nil {
			return nil, fmt.Errorf("rdma: send QP info: %w", err)
		}
	}
	return remote, nil
}

func syncReady(ctx context.Context, nc net.Conn) error {
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := nc.Write(wire.AppendResult(nil, &wire.Result{Status: wire.StatusOK})); err != nil {
		return fmt.Errorf("rdma: ready: %w", err)
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil {
		return fmt.Errorf("rdma: waiting for the peer's QPs: %w", err)
	}
	if typ != wire.MsgResult {
		return fmt.Errorf("rdma: %w: expected ready, got message type %d", transport.ErrProtocol, typ)
	}
	if r, err := wire.DecodeResult(body); err != nil || r.Status != wire.StatusOK {
		return fmt.Errorf("rdma: peer failed to bring its QPs up: %v %v", r, err)
	}
	return nil
}

// rtrError explains a failed RTR transition: it names both sides' device,
// port, GID index, MTU and LID and says which differ (the classic
// "Failed to modify QP to RTR" of engines that do not negotiate the MTU).
func rtrError(err error, l, r *wire.VerbsInfo, mtu int) error {
	var diff []string
	if l.MTU != r.MTU {
		diff = append(diff, fmt.Sprintf("active MTU %d vs %d (path MTU set to %d)", l.MTU, r.MTU, mtu))
	}
	if l.LinkLayer != r.LinkLayer {
		diff = append(diff, "link layer")
	}
	if l.GIDIndex != r.GIDIndex {
		diff = append(diff, fmt.Sprintf("GID index %d vs %d", l.GIDIndex, r.GIDIndex))
	}
	if l.LinkLayer == wire.LinkIB && l.LID != r.LID {
		diff = append(diff, fmt.Sprintf("LID %d vs %d", l.LID, r.LID))
	}
	d := "nothing obvious differs"
	if len(diff) > 0 {
		d = "differs: " + strings.Join(diff, ", ")
	}
	// ErrNotSupported: this pair of devices cannot be connected, so the
	// auto policy falls back to the next transport rather than fail.
	return fmt.Errorf("rdma: %w: failed to modify QP to RTR: %w; local %s, remote %s; %s", transport.ErrNotSupported, err, l, r, d)
}

// Close releases the device: registrations, protection domain, context.
// The engine calls it after closing every peer and region.
func (t *Transport) Close() error {
	if t.rails != nil {
		t.rails.close()
	}
	t.mu.Lock()
	devs := append(t.old, t.dev)
	t.dev, t.old = nil, nil
	t.mu.Unlock()
	for _, d := range devs {
		if d != nil {
			d.close()
		}
	}
	return nil
}

// DeviceInUse describes the device, port and GID the transport has open.
type DeviceInUse = transport.DeviceInUse

// Devices reports the device the transport has open and, over several
// devices (Config.Devices), each rail; it opens none.
func (t *Transport) Devices() transport.Devices {
	var ds transport.Devices
	if d, ok := t.inUse(); ok {
		ds.InUse = &d
	}
	ds.Rails = t.railStatus()
	return ds
}

// inUse reports the device the transport has open, without opening one:
// false until the transport was first used, and after its device was
// removed.
func (t *Transport) inUse() (DeviceInUse, bool) {
	if t.rails != nil {
		return t.rails.inUse()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.dev
	if d == nil || d.removed() {
		return DeviceInUse{}, false
	}
	return DeviceInUse{Device: d.info.Name, Port: d.port.Num, GIDIndex: d.gid.Index, GIDType: d.gid.Type, MTU: d.mtu,
		GPUMemory: d.gpuMemory(), Grants: grantEnforcement(d.info)}, true
}
