package shm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stream"
)

// Transport is the shm transport: one-sided operations between processes on
// one host are a single memcpy into the peer's memfd-backed region, mapped
// into this process with pidfd_getfd. Sends and notifications take a ring
// of shared memory in each direction (msgs.go); everything else (attach
// requests, revocations, credits) travels over a control stream
// (transport/stream).
type Transport struct {
	once   sync.Once
	closed sync.Once
	err    error
	fd     int // probe memfd: its first bytes are the cookie
	cookie [16]byte
	probe  []byte
	gpu    gpuState
}

var _ transport.Transport = (*Transport)(nil)

var _ transport.Announcer = (*Endpoint)(nil)

// New returns the shm transport.
func New() *Transport { return &Transport{fd: -1} }

// Name is "shm".
func (*Transport) Name() string { return "shm" }

// Caps is what shm can do: it connects the peers of one host, maps their
// regions (each backed by a memfd it passes over), moves GPU memory with
// CUDA IPC, and maps a read-only region read-only, so that the kernel
// keeps the peer to its rights (see rights_test.go).
var Caps = transport.Caps{
	SameHost:   true,
	MapsMemory: true,
	Memory:     mem.KindSet(mem.KindHost, mem.KindCUDA),
	Rights:     transport.RightsByKernel,
}

// Caps returns the package's Caps.
func (*Transport) Caps() transport.Caps { return Caps }

// Devices is none: it opens no device.
func (*Transport) Devices() transport.Devices { return transport.Devices{} }

const blobLen = 4 + 16

func (t *Transport) init() {
	t.once.Do(func() {
		fd, err := sys.MemfdCreate("xfer-shm-probe", false)
		if err != nil {
			t.err = fmt.Errorf("shm: %w: %w", transport.ErrNotSupported, err)
			return
		}
		if err := sys.Ftruncate(fd, int64(sys.PageSize())); err != nil {
			sys.Close(fd)
			t.err = fmt.Errorf("shm: %w: %w", transport.ErrNotSupported, err)
			return
		}
		m, err := sys.MmapShared(fd, sys.PageSize())
		if err != nil {
			sys.Close(fd)
			t.err = fmt.Errorf("shm: %w: %w", transport.ErrNotSupported, err)
			return
		}
		_, _ = rand.Read(t.cookie[:])
		copy(m, t.cookie[:])
		t.fd, t.probe = fd, m
		// Check that this kernel lets us take a file from a process at all.
		pidfd, err := attachProbe(0, fd, t.cookie)
		if err != nil {
			t.err = err
			return
		}
		sys.Close(pidfd)
	})
}

// Close releases the probe memfd and its mapping; the engine calls it when
// it closes. Endpoints already connected do not need them. Afterwards the
// transport is unavailable. Idempotent.
func (t *Transport) Close() error {
	t.once.Do(func() { t.err = fmt.Errorf("shm: transport closed: %w", net.ErrClosed) })
	t.closed.Do(func() {
		t.gpu.release()
		if t.probe != nil {
			sys.Munmap(t.probe)
		}
		if t.fd >= 0 {
			sys.Close(t.fd)
		}
	})
	return nil
}

// Available reports whether this kernel supports pidfd_getfd and memfd.
func (t *Transport) Available() error {
	t.init()
	return t.err
}

// LocalBlob carries the probe memfd number and its cookie.
func (t *Transport) LocalBlob() []byte {
	t.init()
	if t.err != nil {
		return nil
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(t.fd))
	b = append(b, t.cookie[:]...)
	return append(b, blobRings)
}

// blobRings, the byte after the cookie, says that this side sets up
// message rings at connect (msgs.go).
const blobRings = 1

// peerRings reports whether the peer's blob offers message rings, as
// this side's always does.
func peerRings(remote []byte) bool {
	return len(remote) > blobLen && remote[blobLen]&blobRings != 0
}

// Usable checks that the peer is on this host and that the kernel lets this
// process take the peer's files: it maps the peer's probe memfd and checks
// its cookie, so a PID from another PID namespace cannot be mistaken for it.
func (t *Transport) Usable(local, remote transport.PeerInfo) error {
	if err := t.Available(); err != nil {
		return err
	}
	if local.HostID != remote.HostID {
		return fmt.Errorf("shm: %w: peer is on another host or PID namespace", transport.ErrNotSupported)
	}
	if len(remote.Blob) < blobLen {
		return fmt.Errorf("shm: %w: peer sent no probe", transport.ErrNotSupported)
	}
	fd := int(binary.LittleEndian.Uint32(remote.Blob))
	var cookie [16]byte
	copy(cookie[:], remote.Blob[4:])
	pidfd, err := attachProbe(remote.PID, fd, cookie)
	if err != nil {
		return err
	}
	sys.Close(pidfd)
	return nil
}

// attachProbe opens pid (0: this process) and checks its probe memfd.
// It returns the pidfd.
func attachProbe(pid, fd int, cookie [16]byte) (int, error) {
	if pid == 0 {
		pid = os.Getpid()
	}
	pidfd, err := sys.PidfdOpen(pid)
	if err != nil {
		return -1, fmt.Errorf("shm: %w: %w", transport.ErrNotSupported, err)
	}
	mfd, err := sys.PidfdGetfd(pidfd, fd)
	if err != nil {
		sys.Close(pidfd)
		return -1, fmt.Errorf("shm: %w: the kernel refused access to the peer's memory (ptrace policy or another user): %w", transport.ErrNotSupported, err)
	}
	defer sys.Close(mfd)
	m, err := sys.MmapShared(mfd, sys.PageSize())
	if err != nil {
		sys.Close(pidfd)
		return -1, fmt.Errorf("shm: %w: %w", transport.ErrNotSupported, err)
	}
	ok := bytes.Equal(m[:16], cookie[:])
	sys.Munmap(m)
	if !ok {
		sys.Close(pidfd)
		return -1, fmt.Errorf("shm: %w: process %d is not the peer (PID namespaces differ)", transport.ErrNotSupported, pid)
	}
	return pidfd, nil
}

// Connect builds an shm endpoint. The dialer checks the acceptor the way the
// acceptor checked it in Usable; when that fails the error matches
// ErrNotSupported, and the engine dials again without shm.
func (t *Transport) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	if err := t.Usable(p.Local, p.Remote); err != nil {
		p.Conn.Close()
		return nil, err
	}
	pidfd, err := sys.PidfdOpen(p.Remote.PID)
	if err != nil {
		p.Conn.Close()
		return nil, fmt.Errorf("shm: %w: %w", transport.ErrNotSupported, err)
	}
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p.Logger = log
	e := &Endpoint{t: t, log: log, pidfd: pidfd, att: map[uint32]*attachment{}, host: p.Host}
	opts := stream.Options{Name: "shm", OnRevoke: e.revoked, OnAttach: t.exportDevice}
	if peerRings(p.Remote.Blob) {
		m, err := setupMsgs(ctx, p.Conn, pidfd, p)
		if err != nil {
			p.Conn.Close()
			sys.Close(pidfd)
			return nil, err
		}
		if m != nil {
			m.countFn = e.sentMsg
			opts.OnCredit, opts.OnDown, opts.BeforeDown = m.onCredit, m.goDown, m.beforeDown
			e.msgs = m
		}
	}
	s, err := stream.New(ctx, p, opts)
	if err != nil {
		if e.msgs != nil {
			e.msgs.start(e)
			e.msgs.close()
		}
		sys.Close(pidfd)
		return nil, err
	}
	e.Stream = s
	if e.msgs != nil {
		fail := s.Fail
		e.msgs.failFn.Store(&fail)
		e.msgs.wmu.Lock()
		e.msgs.streamDone, e.msgs.streamErr = s.Done(), s.Err
		e.msgs.wmu.Unlock()
		e.msgs.start(e)
	}
	return e, nil
}

// Endpoint is an shm endpoint: one-sided operations are copies into the
// peer's mapped regions; sends and notifications take its message rings;
// everything else (attach requests, credits, regions without a memfd)
// travels over its stream.
type Endpoint struct {
	t   *Transport
	log *slog.Logger
	// The stream carries what is neither a copy nor a message: attaches,
	// revokes and credits (and the messages when msgs is nil); its
	// methods are the endpoint's but for Post, Counts, Progress,
	// AppendSend, Consumed, Cancel and Close. (Its Cancel serves: a copy is done when
	// Post returns, so only what waits on the stream can be cancelled.)
	*stream.Stream
	pidfd int
	host  transport.Host
	// msgs carries the SENDs and notifications when both sides set up
	// its rings (msgs.go); nil: the stream carries them.
	msgs *msgs

	mu        sync.Mutex
	att       map[uint32]*attachment
	attaching map[uint32]bool // regions being attached in the background
	revokes   uint64          // revocations seen; an attach racing one is not cached
	closed    bool
	wg        sync.WaitGroup // background attaches

	// The copies' counts (transport.Counter), under mu.
	ops            [transport.NumOpKinds]uint64
	sent, received uint64
}

var (
	_ transport.Endpoint = (*Endpoint)(nil)
	_ transport.Appender = (*Endpoint)(nil)
	_ transport.Counter  = (*Endpoint)(nil)

	_ transport.DeviceMover = (*Endpoint)(nil)
)

// attachment is a peer region mapped into this process.
type attachment struct {
	base, n uint64
	key     uint64
	rights  transport.Access
	mem     []byte // the region mapped, or nil
	// dev is the device address of a GPU region in this process, opened
	// in ctx (through ipc, or the owner's own address in one process);
	// 0 when the region is host memory or cannot be opened here. A
	// region with neither mem nor dev takes the stream path.
	dev   uintptr
	ctx   mem.Device
	ipc   *ipcOpen
	t     *Transport
	refs  atomic.Int64
	gone  atomic.Bool
	unmap sync.Once
}

func (a *attachment) release() {
	if a.refs.Add(-1) == 0 && a.gone.Load() {
		a.unmap.Do(func() {
			if a.mem != nil {
				sys.Munmap(a.mem)
			}
			if a.ipc != nil {
				a.t.gpu.close(a.ipc)
			}
		})
	}
}

// Post runs one-sided operations as copies and passes the rest on.
func (e *Endpoint) Post(ops []*transport.Op, wait bool) {
	for i, op := range ops {
		switch op.Kind {
		case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
			if e.copyOp(op) {
				continue
			}
		case transport.OpSend:
			if e.msgs != nil {
				e.mu.Lock()
				e.ops[op.Kind]++
				e.mu.Unlock()
				if e.msgs.send(op) {
					e.sentMsg(op)
				}
				continue
			}
		}
		if onDevice(op) {
			// MovesDevice said yes, but the region went meanwhile (a
			// revoke): the stream cannot read GPU memory.
			complete(op, fmt.Errorf("shm %s from GPU memory: the peer revoked the region while the operation was posted: %w",
				op.Kind, &transport.AccessError{Kind: transport.UnknownRegion, Region: op.Remote.Region, Addr: op.Remote.Addr, Len: uint64(len(op.Local))}))
			continue
		}
		e.Stream.Post(ops[i:i+1], wait)
	}
}

// copyOp performs op as a copy; false means it must take the stream path.
func (e *Endpoint) copyOp(op *transport.Op) bool {
	want := transport.AccessWrite
	if op.Kind == transport.OpRead {
		want = transport.AccessRead
	}
	a, attach, err := e.take(op, want)
	if err != nil {
		complete(op, err)
		return true
	}
	if a == nil {
		if attach {
			// Not mapped yet. Attaching takes a round trip to the peer,
			// and Post must not wait (it may run on the receive path,
			// which that answer needs): map it in the background and let
			// this operation take the stream path, which the peer serves
			// and checks itself.
			e.attachLater(op.Remote.Region, op.Remote.Key, want)
		}
		return false
	}
	defer a.release()
	n := uint64(len(op.Local))
	off := op.Remote.Addr - a.base
	if a.dev != 0 || onDevice(op) {
		if err := e.copyDevice(op, a, off, n); err != nil {
			complete(op, err)
			return true
		}
	} else if op.Kind == transport.OpRead {
		copyMem(op.Local, a.mem[off:off+n])
	} else {
		copyMem(a.mem[off:off+n], op.Local)
	}
	if op.Kind == transport.OpRead {
		complete(op, nil)
		return true
	}
	if op.Kind == transport.OpWriteImm {
		if err := e.notify(transport.Notification{Value: op.Imm, Region: op.Remote.Region, Addr: op.Remote.Addr, Len: n}); err != nil {
			complete(op, err)
			return true
		}
		e.mu.Lock()
		e.sent += n
		e.mu.Unlock()
	}
	complete(op, nil)
	return true
}

func complete(op *transport.Op, err error) {
	op.Err = err
	op.Done.OpDone(op)
}

// take decides, under the endpoint's lock, how op goes. When its remote
// region is mapped with the rights wanted and op fits in it, it returns
// the attachment, with a reference the caller releases: the copy goes
// ahead. When op must fail here (the endpoint is closed, op is out of the
// region's range), it returns the error. Otherwise op takes the stream
// path, and attach reports whether the region is to be mapped meanwhile.
// It counts the operations it keeps off the stream, and the bytes of
// those that cannot fail any more (transport.Counter), under the lock it
// takes anyway: no atomic of their own.
func (e *Endpoint) take(op *transport.Op, want transport.Access) (a *attachment, attach bool, err error) {
	e.mu.Lock()
	if e.closed {
		e.ops[op.Kind]++
		e.mu.Unlock()
		return nil, false, e.closedErr()
	}
	a = e.att[op.Remote.Region]
	if a == nil || a.rights&want != want || a.key != op.Remote.Key {
		e.mu.Unlock()
		return nil, true, nil
	}
	if a.mem == nil && a.dev == 0 {
		e.mu.Unlock()
		return nil, false, nil
	}
	e.ops[op.Kind]++
	n, addr := uint64(len(op.Local)), op.Remote.Addr
	if addr < a.base || addr-a.base > a.n || n > a.n-(addr-a.base) {
		e.mu.Unlock()
		return nil, false, &transport.AccessError{Kind: transport.OutOfRange, Want: want, Region: op.Remote.Region, Addr: addr, Len: n}
	}
	a.refs.Add(1)
	switch op.Kind {
	case transport.OpRead:
		e.received += n
	case transport.OpWrite:
		e.sent += n
	} // a WRITE_IMM's once its notification is sent
	e.mu.Unlock()
	return a, false, nil
}

// Counts implements transport.Counter: the copies' counts and the
// stream's.
func (e *Endpoint) Counts() transport.Counts {
	e.mu.Lock()
	c := transport.Counts{Ops: e.ops, Sent: e.sent, Received: e.received}
	e.mu.Unlock()
	c.Add(e.Stream.Counts())
	return c
}

// attachLater maps the peer region in the background, unless that is under
// way already.
func (e *Endpoint) attachLater(id uint32, key uint64, want transport.Access) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.attaching[id] {
		return
	}
	if e.attaching == nil {
		e.attaching = make(map[uint32]bool)
	}
	e.attaching[id] = true
	e.wg.Go(func() {
		// A failed attach (a wrong key, a revoked region) leaves nothing:
		// the operations that take the stream path get the peer's own
		// answer.
		if a, err := e.attachment(id, key, want); err == nil {
			a.release()
		}
		e.mu.Lock()
		delete(e.attaching, id)
		e.mu.Unlock()
	})
}

// attachment returns the peer region, mapping it on first use, with a
// reference the caller releases. The target checks key and rights when it
// answers the attach; later operations are checked against what it said.
func (e *Endpoint) attachment(id uint32, key uint64, want transport.Access) (*attachment, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, e.closedErr()
	}
	a := e.att[id]
	if a != nil && a.rights&want == want && a.key == key {
		a.refs.Add(1)
		e.mu.Unlock()
		return a, nil
	}
	if a != nil && a.key == key {
		// Ask for the rights the old mapping had as well: the new one
		// replaces it, and is writable only if WRITE is among them.
		want |= a.rights
	}
	gen := e.revokes
	e.mu.Unlock()
	info, err := e.Stream.Attach(context.Background(), id, key, want)
	if err != nil {
		var ae *transport.AccessError
		if errors.As(err, &ae) {
			ae.Region, ae.Len = id, 0
		}
		return nil, err
	}
	na := &attachment{base: info.Base, n: info.Len, key: key, rights: want, t: e.t}
	e.attachDevice(na, info)
	// The pidfd is used and closed under e.mu: a closed descriptor number
	// could be reused by another process's pidfd.
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.closedErr()
	}
	if info.FD >= 0 {
		na.mem, err = e.mapRegion(int(info.FD), info.Len, want&transport.AccessWrite != 0)
		if err != nil {
			return nil, err
		}
	}
	if old := e.att[id]; old != nil {
		old.gone.Store(true)
		old.release()
	}
	if e.revokes != gen {
		// A revoke arrived while the attach was answered: use the mapping
		// for this operation only (the memfd keeps it valid) and ask again
		// next time.
		na.gone.Store(true)
		na.refs.Store(1)
		return na, nil
	}
	e.att[id] = na
	na.refs.Store(2) // the table's and the caller's
	return na, nil
}

// mapRegion maps the peer's memfd fd, n bytes, writable only when the
// region grants WRITE. For a region that grants none, the peer passed a
// descriptor opened read-only (mem.Handle.FD) of a memfd it sealed against
// writes, so the kernel would refuse a writable mapping anyway: a store
// through this one faults.
func (e *Endpoint) mapRegion(fd int, n uint64, writable bool) ([]byte, error) {
	mfd, err := sys.PidfdGetfd(e.pidfd, fd)
	if err != nil {
		return nil, fmt.Errorf("shm: map peer region: %w", err)
	}
	defer sys.Close(mfd)
	mmap := sys.MmapSharedReadOnly
	if writable {
		mmap = sys.MmapShared
	}
	m, err := mmap(mfd, int(n))
	if err != nil {
		return nil, fmt.Errorf("shm: map peer region: %w", err)
	}
	return m, nil
}

// revoked drops a region the peer deregistered.
func (e *Endpoint) revoked(id uint32) {
	e.mu.Lock()
	a := e.att[id]
	delete(e.att, id)
	e.revokes++
	e.mu.Unlock()
	if a != nil {
		a.gone.Store(true)
		a.release()
	}
}

func (e *Endpoint) closedErr() error {
	if err := e.Err(); err != nil {
		return err
	}
	return &transport.LinkError{Peer: "shm peer", Local: true}
}

// Close closes the stream, stops the message ring's reader and unmaps
// every attachment.
func (e *Endpoint) Close() error {
	if e.msgs != nil {
		e.msgs.stop.Store(true) // deliver nothing more
	}
	err := e.Stream.Close() // fails the background attaches' round trips
	if e.msgs != nil {
		// Not under e.mu: the reader may be delivering a message whose
		// handler posts.
		e.msgs.close()
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.wg.Wait()
		return err
	}
	e.closed = true // no attach starts now, and those under way map nothing
	att := e.att
	e.att = nil
	sys.Close(e.pidfd)
	e.mu.Unlock()
	e.wg.Wait()
	for _, a := range att {
		a.gone.Store(true)
		a.release()
	}
	return err
}

// notify sends a write-with-notify's notification, after its data: on
// the message ring, or on the stream.
func (e *Endpoint) notify(n transport.Notification) error {
	if e.msgs != nil {
		return e.msgs.notify(n)
	}
	return e.Stream.Notify(n)
}

// sentMsg counts a message sent on the ring.
func (e *Endpoint) sentMsg(op *transport.Op) {
	e.mu.Lock()
	e.sent += uint64(len(op.Local))
	e.mu.Unlock()
}

// AppendSend implements transport.Appender: on the message ring, or on
// the stream.
func (e *Endpoint) AppendSend(max int, fill func(b []byte) []byte) (bool, error) {
	if e.msgs != nil {
		return e.msgs.appendSend(max, fill)
	}
	return e.Stream.AppendSend(max, fill)
}

// Consumed returns receive credits over the stream, for messages from the
// ring or the stream.
func (e *Endpoint) Consumed(n int) {
	if e.msgs != nil {
		e.msgs.inFlight.Add(int64(-n))
	}
	e.Stream.Consumed(n)
}

// Cancel takes back a SEND waiting for credit, or what the stream can.
func (e *Endpoint) Cancel(op *transport.Op) bool {
	if e.msgs != nil && op.Kind == transport.OpSend {
		return e.msgs.cancel(op)
	}
	return e.Stream.Cancel(op)
}

// Progress implements transport.Progresser: the stream's, plus the ring's
// entries read, and what waits on the ring for credit or space.
func (e *Endpoint) Progress() (moved uint64, pending int) {
	moved, pending = e.Stream.Progress()
	if e.msgs != nil {
		moved += e.msgs.received.Load() + e.msgs.peerHead()
		pending += e.msgs.waiting()
	}
	return moved, pending
}
