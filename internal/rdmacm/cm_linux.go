package rdmacm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/xferio/xfer/internal/sys"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/xferio/xfer/internal/ibv"
)

// The kernel's rdma_cm ABI (include/uapi/rdma/rdma_user_cm.h): a command is
// written to the device as a header and a command struct; the kernel writes
// its response to the address the command carries. TestKCMABI checks these
// sizes and offsets against the system's header.
const (
	ucmaCmdCreateID     = 0
	ucmaCmdDestroyID    = 1
	ucmaCmdResolveRoute = 4
	ucmaCmdConnect      = 6
	ucmaCmdListen       = 7
	ucmaCmdAccept       = 8
	ucmaCmdReject       = 9
	ucmaCmdDisconnect   = 10
	ucmaCmdInitQPAttr   = 11
	ucmaCmdGetEvent     = 12
	ucmaCmdQuery        = 19
	ucmaCmdBind         = 20
	ucmaCmdResolveAddr  = 21

	ucmaHdrLen = 8 // struct rdma_ucm_cmd_hdr: cmd u32, in u16, out u16

	ucmaCreateIDLen     = 24  // struct rdma_ucm_create_id
	ucmaDestroyIDLen    = 16  // struct rdma_ucm_destroy_id
	ucmaBindLen         = 136 // struct rdma_ucm_bind
	ucmaResolveAddrLen  = 272 // struct rdma_ucm_resolve_addr
	ucmaResolveRouteLen = 8   // struct rdma_ucm_resolve_route
	ucmaQueryLen        = 16  // struct rdma_ucm_query
	ucmaListenLen       = 8   // struct rdma_ucm_listen
	ucmaConnectLen      = 288 // struct rdma_ucm_connect
	ucmaAcceptLen       = 296 // struct rdma_ucm_accept
	ucmaRejectLen       = 264 // struct rdma_ucm_reject
	ucmaDisconnectLen   = 4   // struct rdma_ucm_disconnect
	ucmaInitQPAttrLen   = 16  // struct rdma_ucm_init_qp_attr
	ucmaGetEventLen     = 8   // struct rdma_ucm_get_event

	ucmaResolveAddrSrc = 16  // rdma_ucm_resolve_addr.src_addr
	ucmaResolveAddrDst = 144 // rdma_ucm_resolve_addr.dst_addr
	ucmaConnectID      = 272 // rdma_ucm_connect.id
	ucmaAcceptParam    = 8   // rdma_ucm_accept.conn_param
	ucmaAcceptID       = 280 // rdma_ucm_accept.id
	ucmaRejectPData    = 8   // rdma_ucm_reject.private_data

	// struct rdma_ucm_conn_param
	ucmaParamPData    = 8
	ucmaParamPDataLen = 264
	ucmaParamSRQ      = 265
	ucmaParamRespRes  = 266
	ucmaParamInitDep  = 267
	ucmaParamFlowCtl  = 268
	ucmaParamRetry    = 269
	ucmaParamRNRRetry = 270
	ucmaParamValid    = 271
	ucmaMaxPData      = 256

	// struct rdma_ucm_query_addr_resp
	ucmaQueryNodeGUID = 0
	ucmaQueryPortNum  = 8
	ucmaQuerySrcAddr  = 16
	ucmaQueryIbdevIdx = 272
	ucmaQueryAddrLen  = 280

	// struct rdma_ucm_event_resp
	ucmaEventID     = 8
	ucmaEventType   = 12
	ucmaEventStatus = 16
	ucmaEventParam  = 20
	// ucmaRespLen is room for any response: struct rdma_ucm_event_resp
	// (336 bytes on current kernels, which want at least 324), the query
	// (280) and struct ib_uverbs_qp_attr (144).
	ucmaRespLen = 512

	rdmaPSTCP = 0x0106
	qpTypeRC  = 2
	// qpAttrIBOnly are attribute bits (21-24) that kernels wrongly set for
	// InfiniBand; librdmacm clears them there too.
	qpAttrIBOnly = 0xe00000
)

// rdmaCMDevice is the kernel's rdma_cm character device.
var rdmaCMDevice = "/dev/infiniband/rdma_cm"

// NewChannel opens the kernel's rdma_cm device. Without the rdma_ucm
// module the error says so and wraps [ErrNotSupported].
func NewChannel() (*Channel, error) {
	fd, err := syscall.Open(rdmaCMDevice, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("open %s (is the rdma_ucm module loaded? `modprobe rdma_ucm`): %w: %w", rdmaCMDevice, ErrNotSupported, err)
		}
		return nil, fmt.Errorf("open %s: %w", rdmaCMDevice, err)
	}
	w, err := sys.NewFDWaiter(fd, rdmaCMDevice)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	live.channels.Add(1)
	return &Channel{fd: fd, w: w, ids: map[uint32]*ID{}}, nil
}

// FD returns the channel's file descriptor, which is non-blocking.
func (ch *Channel) FD() int {
	if ch == nil {
		return -1
	}
	return ch.fd
}

// Close closes the channel and wakes a waiter with ErrClosed. It fails, and
// the channel stays open, while IDs on it are open.
func (ch *Channel) Close() error {
	if ch == nil || ch.fd < 0 {
		return nil
	}
	ch.mu.Lock()
	n := len(ch.ids)
	ch.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("close %s: %d CM IDs are still open: %w", rdmaCMDevice, n, syscall.EBUSY)
	}
	ch.w.Close()
	syscall.Close(ch.fd)
	ch.fd = -1
	live.channels.Add(-1)
	return nil
}

// command is one rdma_cm command: the header and the command struct.
type command []byte

func newCommand(cmd uint32, n int) command {
	b := make(command, ucmaHdrLen+n)
	binary.NativeEndian.PutUint32(b, cmd)
	binary.NativeEndian.PutUint16(b[4:], uint16(n))
	return b
}

func (c command) body() []byte            { return c[ucmaHdrLen:] }
func (c command) u8(off int, v uint8)     { c[ucmaHdrLen+off] = v }
func (c command) u16(off int, v uint16)   { binary.NativeEndian.PutUint16(c[ucmaHdrLen+off:], v) }
func (c command) u32(off int, v uint32)   { binary.NativeEndian.PutUint32(c[ucmaHdrLen+off:], v) }
func (c command) u64(off int, v uint64)   { binary.NativeEndian.PutUint64(c[ucmaHdrLen+off:], v) }
func (c command) bytes(off int, b []byte) { copy(c[ucmaHdrLen+off:], b) }

// do writes cmd to fd. When resp is not nil, its address is stored at
// offset respAt of the command struct and its length in the header: the
// kernel writes its answer there. A command that would wait fails with
// EAGAIN.
func do(fd int, cmd command, respAt int, resp []byte) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	if resp != nil {
		pin.Pin(&resp[0])
		binary.NativeEndian.PutUint16(cmd[6:], uint16(len(resp)))
		cmd.u64(respAt, uint64(uintptr(unsafe.Pointer(&resp[0]))))
	}
	_, err := syscall.Write(fd, cmd)
	runtime.KeepAlive(resp)
	return err
}

func (ch *Channel) check() error {
	if ch == nil || ch.fd < 0 {
		return ErrClosed
	}
	return nil
}

// CreateID creates an ID for reliable connections (RDMA_PS_TCP).
func (ch *Channel) CreateID() (*ID, error) {
	if err := ch.check(); err != nil {
		return nil, err
	}
	cmd := newCommand(ucmaCmdCreateID, ucmaCreateIDLen)
	cmd.u64(0, 1) // uid: events carry the handle too
	cmd.u16(16, rdmaPSTCP)
	cmd.u8(18, qpTypeRC)
	resp := make([]byte, 4)
	if err := do(ch.fd, cmd, 8, resp); err != nil {
		return nil, fmt.Errorf("rdma_cm create ID: %w", err)
	}
	return ch.track(binary.NativeEndian.Uint32(resp)), nil
}

func (ch *Channel) track(handle uint32) *ID {
	id := &ID{ch: ch, handle: handle, open: true}
	ch.mu.Lock()
	ch.ids[handle] = id
	ch.mu.Unlock()
	live.ids.Add(1)
	return id
}

// WaitEvent waits for the next event of the channel's IDs until ctx ends.
// Events of IDs already closed are dropped.
func (ch *Channel) WaitEvent(ctx context.Context) (Event, error) {
	return ch.wait(ctx, time.Time{})
}

// GetEvent waits up to timeout (no limit if timeout <= 0) for the next
// event. After the timeout the error matches os.ErrDeadlineExceeded.
func (ch *Channel) GetEvent(timeout time.Duration) (Event, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	return ch.wait(context.Background(), deadline)
}

func (ch *Channel) wait(ctx context.Context, deadline time.Time) (Event, error) {
	if err := ch.check(); err != nil {
		return Event{}, err
	}
	resp := make([]byte, ucmaRespLen)
	cmd := newCommand(ucmaCmdGetEvent, ucmaGetEventLen)
	for {
		err := closedErr(ch.w.Wait(ctx, deadline, func() (bool, error) {
			err := do(ch.fd, cmd, 0, resp)
			if err == syscall.EAGAIN {
				return false, nil
			}
			return true, err
		}))
		if err != nil {
			return Event{}, fmt.Errorf("rdma_cm get event: %w", err)
		}
		if ev, ok := ch.event(resp); ok {
			return ev, nil
		}
	}
}

// event decodes struct rdma_ucm_event_resp.
func (ch *Channel) event(resp []byte) (Event, bool) {
	handle := binary.NativeEndian.Uint32(resp[ucmaEventID:])
	ev := Event{
		Type:   EventType(binary.NativeEndian.Uint32(resp[ucmaEventType:])),
		Status: int(int32(binary.NativeEndian.Uint32(resp[ucmaEventStatus:]))),
	}
	p := resp[ucmaEventParam:]
	switch ev.Type {
	case EventConnectRequest, EventConnectResponse, EventEstablished, EventRejected,
		EventDisconnected, EventConnectError, EventUnreachable:
		if n := int(p[ucmaParamPDataLen]); n > 0 {
			ev.PrivateData = append([]byte(nil), p[ucmaParamPData:ucmaParamPData+min(n, ucmaMaxPData)]...)
		}
		ev.ResponderResources = int(p[ucmaParamRespRes])
		ev.InitiatorDepth = int(p[ucmaParamInitDep])
	}
	if ev.Type == EventConnectRequest {
		ev.ID = ch.track(handle)
		return ev, true
	}
	ch.mu.Lock()
	ev.ID = ch.ids[handle]
	ch.mu.Unlock()
	return ev, ev.ID != nil
}

func (id *ID) String() string {
	if id == nil || !id.open {
		return "rdma_cm ID (closed)"
	}
	return fmt.Sprintf("rdma_cm ID %d", id.handle)
}

func (id *ID) check() error {
	if id == nil || !id.open || id.ch.check() != nil {
		return ErrClosed
	}
	return nil
}

// putSockaddr writes a as a struct sockaddr_in or sockaddr_in6 with port
// and returns its length.
func putSockaddr(b []byte, a netip.AddrPort) (int, error) {
	ip := a.Addr()
	switch {
	case !ip.IsValid():
		return 0, fmt.Errorf("invalid address: %w", syscall.EINVAL)
	case ip.Is4() || ip.Is4In6():
		binary.NativeEndian.PutUint16(b, syscall.AF_INET)
		binary.BigEndian.PutUint16(b[2:], a.Port())
		v4 := ip.Unmap().As4()
		copy(b[4:8], v4[:])
		return syscall.SizeofSockaddrInet4, nil
	default:
		binary.NativeEndian.PutUint16(b, syscall.AF_INET6)
		binary.BigEndian.PutUint16(b[2:], a.Port())
		v6 := ip.As16()
		copy(b[8:24], v6[:])
		if z := ip.Zone(); z != "" {
			ifi, err := net.InterfaceByName(z)
			if err != nil {
				return 0, err
			}
			binary.NativeEndian.PutUint32(b[24:], uint32(ifi.Index))
		}
		return syscall.SizeofSockaddrInet6, nil
	}
}

// sockaddrPort reads the port of a struct sockaddr_in or sockaddr_in6.
func sockaddrPort(b []byte) uint16 { return binary.BigEndian.Uint16(b[2:]) }

// Bind binds the ID to a local address, and through it to an RDMA device;
// port 0 picks a free port, see Port.
func (id *ID) Bind(addr netip.AddrPort) error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdBind, ucmaBindLen)
	cmd.u32(0, id.handle)
	n, err := putSockaddr(cmd.body()[8:], addr)
	if err == nil {
		cmd.u16(4, uint16(n))
		err = do(id.ch.fd, cmd, 0, nil)
	}
	if err != nil {
		return fmt.Errorf("rdma_cm bind %s: %w", addr, err)
	}
	return nil
}

// Listen starts listening for connections on the bound address; each
// arrives as a EventConnectRequest with a new ID.
func (id *ID) Listen(backlog int) error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdListen, ucmaListenLen)
	cmd.u32(0, id.handle)
	cmd.u32(4, uint32(backlog))
	if err := do(id.ch.fd, cmd, 0, nil); err != nil {
		return fmt.Errorf("rdma_cm listen: %w", err)
	}
	return nil
}

// Query returns the ID's device, port and local address.
func (id *ID) Query() (Addr, error) {
	if err := id.check(); err != nil {
		return Addr{}, err
	}
	cmd := newCommand(ucmaCmdQuery, ucmaQueryLen)
	cmd.u32(8, id.handle)
	cmd.u32(12, 0) // RDMA_USER_CM_QUERY_ADDR
	resp := make([]byte, ucmaQueryAddrLen)
	binary.NativeEndian.PutUint32(resp[ucmaQueryIbdevIdx:], 0xffffffff)
	if err := do(id.ch.fd, cmd, 0, resp); err != nil {
		return Addr{}, fmt.Errorf("rdma_cm query: %w", err)
	}
	a := Addr{
		NodeGUID:    formatGUID(*(*[8]byte)(resp[ucmaQueryNodeGUID:])),
		DeviceIndex: int(int32(binary.NativeEndian.Uint32(resp[ucmaQueryIbdevIdx:]))),
		Port:        int(resp[ucmaQueryPortNum]),
		SrcPort:     sockaddrPort(resp[ucmaQuerySrcAddr:]),
	}
	return a, nil
}

// Port returns the local port the ID is bound to, or 0.
func (id *ID) Port() uint16 {
	a, err := id.Query()
	if err != nil {
		return 0
	}
	return a.SrcPort
}

// OnDevice reports whether the ID is bound to the device of c.
func (id *ID) OnDevice(c *ibv.Context) (bool, error) {
	a, err := id.Query()
	if err != nil {
		return false, err
	}
	if c == nil {
		return false, ErrClosed
	}
	if a.DeviceIndex >= 0 {
		if idx := c.KernelIndex(); idx >= 0 {
			return a.DeviceIndex == idx, nil
		}
	}
	info, err := c.QueryDevice()
	if err != nil {
		return false, err
	}
	return a.NodeGUID == info.NodeGUID, nil
}

// ResolveAddrPort starts resolving dst to an RDMA device and address; the
// channel reports EventAddrResolved or EventAddrError. timeout defaults
// to 2 s.
func (id *ID) ResolveAddrPort(dst netip.AddrPort, timeout time.Duration) error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdResolveAddr, ucmaResolveAddrLen)
	cmd.u32(0, id.handle)
	cmd.u32(4, uint32(timeoutMS(timeout)))
	n, err := putSockaddr(cmd.body()[ucmaResolveAddrDst:], dst)
	if err == nil {
		cmd.u16(10, uint16(n)) // dst_size; src_size 0: any
		err = do(id.ch.fd, cmd, 0, nil)
	}
	if err != nil {
		return fmt.Errorf("rdma_cm resolve address %s: %w", dst, err)
	}
	return nil
}

// ResolveRoute starts resolving the route to the resolved address; the
// channel reports EventRouteResolved or EventRouteError.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdResolveRoute, ucmaResolveRouteLen)
	cmd.u32(0, id.handle)
	cmd.u32(4, uint32(timeoutMS(timeout)))
	if err := do(id.ch.fd, cmd, 0, nil); err != nil {
		return fmt.Errorf("rdma_cm resolve route: %w", err)
	}
	return nil
}

// modifyQP moves qp to state with the attributes the kernel computes for
// the ID's connection.
func (id *ID) modifyQP(qp *ibv.QP, state ibv.QPState, name string, destRd, rd int) error {
	cmd := newCommand(ucmaCmdInitQPAttr, ucmaInitQPAttrLen)
	cmd.u32(8, id.handle)
	cmd.u32(12, uint32(state))
	resp := make([]byte, ucmaRespLen)
	if err := do(id.ch.fd, cmd, 0, resp); err != nil {
		return fmt.Errorf("rdma_cm QP attributes for %s: %w", name, err)
	}
	var off uint32
	if c := qp.Context(); c.Transport() == "InfiniBand" {
		if a, err := id.Query(); err == nil && c.PortIsInfiniBand(a.Port) {
			off = qpAttrIBOnly
		}
	}
	return qp.ModifyFromCM(name, state, resp, off, destRd, rd)
}

// InitQP moves qp, a QP of the caller's (on the device the ID is bound or
// resolved to), to INIT for the ID's connection. Call it after the route is
// resolved (active side) or on the connection request (passive side), and
// before Connect or Accept.
func (id *ID) InitQP(qp *ibv.QP) error {
	if err := id.check(); err != nil {
		return err
	}
	return id.modifyQP(qp, ibv.QPSInit, "INIT", -1, -1)
}

// connParam fills a struct rdma_ucm_conn_param at off of cmd.
func connParam(cmd command, off int, qp *ibv.QP, pdata []byte, rd, retry, rnrRetry int) error {
	if len(pdata) > ucmaMaxPData {
		return fmt.Errorf("%d bytes of private data, at most %d fit: %w", len(pdata), ucmaMaxPData, syscall.EINVAL)
	}
	cmd.u32(off, qp.Num())
	cmd.bytes(off+ucmaParamPData, pdata)
	cmd.u8(off+ucmaParamPDataLen, uint8(len(pdata)))
	if qp.HasSRQ() {
		cmd.u8(off+ucmaParamSRQ, 1)
	}
	cmd.u8(off+ucmaParamRespRes, uint8(rd))
	cmd.u8(off+ucmaParamInitDep, uint8(rd))
	cmd.u8(off+ucmaParamFlowCtl, 1)
	cmd.u8(off+ucmaParamRetry, wireRetry(retry))
	cmd.u8(off+ucmaParamRNRRetry, wireRetry(rnrRetry))
	cmd.u8(off+ucmaParamValid, 1)
	return nil
}

// Connect connects qp (in INIT, see InitQP) to the resolved route. rd is
// how many RDMA READs either side may have outstanding against the other.
// On InfiniBand and RoCE the channel reports EventConnectResponse, after
// which Established finishes the connection; on iWARP it reports
// EventEstablished. Errors are EventRejected, EventUnreachable or
// EventConnectError. Private data: at most 56 bytes on InfiniBand and
// RoCE.
func (id *ID) Connect(qp *ibv.QP, privateData []byte, rd int) error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdConnect, ucmaConnectLen)
	if err := connParam(cmd, 0, qp, privateData, rd, id.retry, id.rnrRetry); err != nil {
		return fmt.Errorf("rdma_cm connect: %w", err)
	}
	cmd.u32(ucmaConnectID, id.handle)
	if err := do(id.ch.fd, cmd, 0, nil); err != nil {
		return fmt.Errorf("rdma_cm connect: %w", err)
	}
	return nil
}

// Established finishes an active connection on EventConnectResponse
// (InfiniBand and RoCE): qp goes to RTR and RTS and the peer is told
// (the CM's RTU). The connection is then established.
func (id *ID) Established(qp *ibv.QP) error {
	if err := id.check(); err != nil {
		return err
	}
	err := id.toRTS(qp, -1, -1)
	if err == nil {
		cmd := newCommand(ucmaCmdAccept, ucmaAcceptLen)
		cmd.u32(ucmaAcceptID, id.handle)
		if err = do(id.ch.fd, cmd, 0, nil); err != nil {
			err = fmt.Errorf("rdma_cm ready to use: %w", err)
		}
	}
	if err != nil {
		qp.ToError()
	}
	return err
}

func (id *ID) toRTS(qp *ibv.QP, destRd, rd int) error {
	if err := id.modifyQP(qp, ibv.QPSInit, "INIT", -1, -1); err != nil {
		return err
	}
	if err := id.modifyQP(qp, ibv.QPSRTR, "RTR", destRd, -1); err != nil {
		return err
	}
	return id.modifyQP(qp, ibv.QPSRTS, "RTS", -1, rd)
}

// Accept accepts the connection request the ID was created for with qp
// (in INIT, see InitQP), which goes to RTR and RTS first. rd is how many
// RDMA READs either side may have outstanding against the other. The
// channel then reports EventEstablished. Private data: at most 196 bytes
// on InfiniBand and RoCE.
func (id *ID) Accept(qp *ibv.QP, privateData []byte, rd int) error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdAccept, ucmaAcceptLen)
	cmd.u64(0, 1) // uid
	if err := connParam(cmd, ucmaAcceptParam, qp, privateData, rd, id.retry, id.rnrRetry); err != nil {
		return fmt.Errorf("rdma_cm accept: %w", err)
	}
	cmd.u32(ucmaAcceptID, id.handle)
	if err := id.toRTS(qp, rd, rd); err != nil {
		qp.ToError()
		return err
	}
	if err := do(id.ch.fd, cmd, 0, nil); err != nil {
		qp.ToError()
		return fmt.Errorf("rdma_cm accept: %w", err)
	}
	return nil
}

// Reject refuses the connection request the ID was created for. Close the
// ID afterwards.
func (id *ID) Reject(privateData []byte) error {
	if err := id.check(); err != nil {
		return err
	}
	if len(privateData) > ucmaMaxPData {
		return fmt.Errorf("rdma_cm reject: %d bytes of private data: %w", len(privateData), syscall.EINVAL)
	}
	cmd := newCommand(ucmaCmdReject, ucmaRejectLen)
	cmd.u32(0, id.handle)
	cmd.u8(4, uint8(len(privateData)))
	cmd.bytes(ucmaRejectPData, privateData)
	if err := do(id.ch.fd, cmd, 0, nil); err != nil {
		return fmt.Errorf("rdma_cm reject: %w", err)
	}
	return nil
}

// Disconnect tears the connection down; both ends get
// EventDisconnected. Move the QP to the error state first (iWARP: the
// connection does it).
func (id *ID) Disconnect() error {
	if err := id.check(); err != nil {
		return err
	}
	cmd := newCommand(ucmaCmdDisconnect, ucmaDisconnectLen)
	cmd.u32(0, id.handle)
	if err := do(id.ch.fd, cmd, 0, nil); err != nil {
		return fmt.Errorf("rdma_cm disconnect: %w", err)
	}
	return nil
}

// Close destroys the ID (not the QP it connected, which is the caller's).
// Events of the ID still queued are dropped. Idempotent and nil-safe.
func (id *ID) Close() error {
	if id == nil || !id.open {
		return nil
	}
	if err := id.ch.check(); err == nil {
		cmd := newCommand(ucmaCmdDestroyID, ucmaDestroyIDLen)
		cmd.u32(8, id.handle)
		resp := make([]byte, 4)
		if err := do(id.ch.fd, cmd, 0, resp); err != nil {
			return fmt.Errorf("rdma_cm destroy ID: %w", err)
		}
	}
	id.open = false
	id.ch.mu.Lock()
	delete(id.ch.ids, id.handle)
	id.ch.mu.Unlock()
	live.ids.Add(-1)
	return nil
}

// RemovalWatch tells when the kernel starts to unregister an RDMA device
// (`rdma link delete`, a driver unbound, a NIC hot-unplugged).
//
// It is a [Channel] with one ID bound to one of the device's IP
// addresses and nothing else. The kernel's rdma_cm reports
// RDMA_CM_EVENT_DEVICE_REMOVAL to every ID bound to a device that is going
// away, early in the unregistration. That matters because the verbs side
// reports nothing: devices without disassociate_ucontext (rxe, siw and
// others) send no async event, and the kernel waits, inside `rdma link
// delete`, until every process has closed every handle it holds on the
// device. A program that watches, and then closes everything on the device,
// lets the removal finish. The watch itself holds no verbs handle.
type RemovalWatch struct {
	ch      *Channel
	id      *ID
	removed chan struct{}
	done    chan struct{}
	once    sync.Once
}

// WatchRemoval starts watching the RDMA device that addr belongs to (an
// address of its netdev: for RoCE the IPv4 address of an IPv4-mapped GID).
// When c is not nil, the address must map to c's device. Without the
// rdma_ucm module, or when no RDMA device has addr, it fails.
func WatchRemoval(addr netip.Addr, c *ibv.Context) (_ *RemovalWatch, err error) {
	ch, err := NewChannel()
	if err != nil {
		return nil, err
	}
	w := &RemovalWatch{ch: ch, removed: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			w.id.Close()
			ch.Close()
		}
	}()
	if w.id, err = ch.CreateID(); err != nil {
		return nil, err
	}
	if err := w.id.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENODEV) {
			err = fmt.Errorf("%w (no RDMA device has that address)", err)
		}
		return nil, err
	}
	if c != nil {
		ok, err := w.id.OnDevice(c)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("rdma_cm maps %s to another device than %s: %w", addr, c.Name(), ErrNotSupported)
		}
	}
	live.watches.Add(1)
	go w.run()
	return w, nil
}

// run waits for the ID's events until DEVICE_REMOVAL, or until Close.
func (w *RemovalWatch) run() {
	defer close(w.done)
	for {
		ev, err := w.ch.WaitEvent(context.Background())
		if err != nil {
			return // closed
		}
		if ev.Type == EventDeviceRemoval {
			close(w.removed)
			return
		}
	}
}

// Removed is closed when the kernel reports the device's removal.
func (w *RemovalWatch) Removed() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.removed
}

// Close stops the watch. Idempotent and nil-safe.
func (w *RemovalWatch) Close() error {
	if w == nil {
		return nil
	}
	w.once.Do(func() {
		w.ch.w.Close() // wakes run
		<-w.done
		w.id.Close()
		w.ch.Close()
		live.watches.Add(-1)
	})
	return nil
}

// formatGUID formats a GUID as ibv.DeviceInfo.NodeGUID does.
func formatGUID(b [8]byte) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

// closedErr maps a waiter's os.ErrClosed to the package's ErrClosed.
func closedErr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}
