package transport

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/xferio/xfer/mem"
)

// Access is the set of rights a region grants to remote peers.
type Access = mem.Access

const (
	// AccessRead lets peers READ from the region.
	AccessRead = mem.AccessRead
	// AccessWrite lets peers WRITE into the region.
	AccessWrite = mem.AccessWrite
	// AccessReadWrite grants both.
	AccessReadWrite = mem.AccessReadWrite
)

// OpKind is the kind of one operation.
type OpKind uint8

const (
	// OpWrite copies Local into the remote region (one-sided).
	OpWrite OpKind = iota + 1
	// OpRead copies the remote region into Local (one-sided).
	OpRead
	// OpWriteImm is OpWrite followed by a notification carrying Imm,
	// delivered to the target once the data is in place.
	OpWriteImm
	// OpSend delivers Local as one message to the peer's receive queue.
	OpSend

	// NumOpKinds bounds the kinds: an array indexed by OpKind has
	// NumOpKinds elements (index 0 unused).
	NumOpKinds
)

func (k OpKind) String() string {
	switch k {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	case OpWriteImm:
		return "write_imm"
	case OpSend:
		return "send"
	}
	return "invalid"
}

// RemoteAddr names bytes in a peer's registered region: the region's ID, an
// absolute address inside the region's address range, and the region's key.
// It is the analogue of an RDMA (remote_addr, rkey) pair.
type RemoteAddr struct {
	Region uint32
	Addr   uint64
	Key    uint64
}

// Completer is told when an operation has finished. OpDone is called exactly
// once per posted Op, from any goroutine, with Op.Err set. It must not block.
type Completer interface {
	OpDone(op *Op)
}

// Op is one operation posted to an Endpoint. Every field is the caller's:
// an endpoint reads them and sets Err, and keeps whatever it needs to
// track the operation in state of its own. The caller owns the Op and the
// memory Local refers to until the Completer has been called for it (or
// Cancel returned true); the endpoint neither retains nor modifies the Op
// afterwards.
type Op struct {
	Kind   OpKind
	Local  []byte // must lie in memory registered with the local engine
	Remote RemoteAddr
	Imm    uint32
	Done   Completer
	// Err is the operation's outcome, set by the endpoint before it calls
	// Done.OpDone.
	Err error
	// Tag is the caller's; transports never read or change it.
	Tag int
	// Region is the registered region that holds Local, pinned by the
	// caller until the operation completes. Transports that register
	// memory with a device (rdma) register it once, whole, and find the
	// registration by handle. When it has a memfd (Region.FD() >= 0), a
	// stream transport may send a WRITE's data from it by reference
	// (sendfile) instead of copying it into the socket: the operation owns
	// Local until it completes, and a WRITE completes only once the target
	// has the data.
	Region *mem.Handle
}

// Endpoint is one connection to one peer, over one transport.
//
// The contract every transport keeps, and the conformance suite
// (transporttest) checks:
//
//   - Every posted operation reaches one end state: its Completer is called
//     exactly once, with Op.Err nil (done: a WRITE's bytes are at the
//     target, a READ's in Local, a SEND in the peer's receive queue) or an
//     error; or Cancel returned true for it and the Completer is never
//     called. No operation is left without one of the two, also when the
//     endpoint fails or is closed.
//   - An error is one of: a transport.AccessError (matching
//     ErrRemoteAccess) when the target refused the access (unknown region,
//     wrong key, out of range, no right), with nothing touched; ErrTooLarge
//     for an operation above the transport's limit, failed at once;
//     errors.ErrUnsupported for an unknown kind; and, once the endpoint is
//     down, its failure (a LinkError) or an error matching net.ErrClosed
//     after Close.
//   - Operations posted to one Endpoint complete in any order, except that
//     an OpWriteImm's notification is delivered only after its data is in
//     place, and OpSend messages arrive in posting order.
//   - Post is batch-first: it takes many operations at once and returns
//     without waiting for them. After Close, or after the endpoint failed,
//     Post completes new operations with the endpoint's error at once.
//   - Completers and the Host's Deliver and Notify may run inside Post (a
//     transport may find completions in the poster's goroutine) and on the
//     endpoint's goroutines. They must not block and must not call Post.
//
// Memory: Local belongs to the endpoint from Post until the end state; the
// endpoint never touches it afterwards. Memory a Host resolves for a peer
// belongs to the endpoint until it calls Release.
type Endpoint interface {
	// Post submits operations. It may block while the connection applies
	// backpressure (send credits, a full send queue); it does not wait for
	// completions. wait tells that the poster waits for these operations
	// as soon as Post returns (a synchronous call): a transport may then
	// find their completions in the poster's goroutine, for a bounded time
	// (rdma polls its completion queue, for up to about a millisecond,
	// when no other goroutine is polling), rather than hand them over from
	// a goroutine of its own. Without wait, Post returns as soon as the
	// operations are posted, so that the poster can post more behind them.
	Post(ops []*Op, wait bool)
	// Cancel abandons op if the endpoint can still take it back. When it
	// returns true, op's Completer will never be called, and the endpoint
	// no longer touches Local or the remote memory for it. When it returns
	// false, the Completer has been or will be called, as for any
	// operation. What can be taken back depends on the transport: an
	// operation whose request has not left the host (tcp, shm: waiting for
	// an answer or for send credit, not sent by reference, and not cut into
	// slices over several connections), and none on rdma, where the NIC
	// owns posted work requests until they complete.
	Cancel(op *Op) bool
	// Consumed tells the endpoint that n delivered messages have been taken
	// from the receive queue, so the peer may send n more.
	Consumed(n int)
	// Revoke tells the peer that local region id is being deregistered, so
	// that it drops any mapping of it.
	Revoke(id uint32)
	// Done is closed when the endpoint has failed or been closed.
	Done() <-chan struct{}
	// Err reports why the endpoint is done, or nil while it is up.
	Err() error
	// Transport is the name of the transport in use: "tcp", "shm" or "rdma".
	Transport() string
	// Close fails outstanding operations, releases every resource and waits
	// for the endpoint's goroutines to exit. It is idempotent.
	Close() error
}

// Poller is implemented by endpoints whose completions a waiting
// goroutine can find itself, polling the completion queue, sooner than a
// poller goroutine would hand them over: rdma's. A caller that is about to
// wait for operations it posted earlier (a batch, waited for after it was
// submitted) calls PollUntil first.
//
// It stays apart from Post's wait flag because the two happen at different
// times: Post's flag covers a call that waits at once, while a batch is
// submitted, then waited for whenever its owner chooses, by which time
// Post has long returned.
type Poller interface {
	// PollUntil polls, in the caller's goroutine, until w reports done,
	// for a bounded time (up to about a millisecond), dispatching whatever
	// else it finds; it returns early when another goroutine is polling
	// or the endpoint is closed. The caller must still wait for w as it
	// would have without PollUntil. It must not be called from a Completer
	// or a message handler.
	PollUntil(w Waiter)
}

// Progresser is implemented by endpoints that can tell whether their peer
// is making progress. The engine's op_timeout watchdog asks it every few
// seconds: a peer with operations outstanding whose count has not moved
// for op_timeout is stalled (stopped, hung, or cut off without a reset),
// and its endpoint is closed so that every operation reaches an end state.
type Progresser interface {
	// Progress returns a count that grows whenever bytes move between the
	// endpoint and its peer (bytes the peer acknowledged or sent,
	// completions the NIC reported), and how many posted operations are
	// outstanding. It must not block; it is called from any goroutine.
	Progress() (moved uint64, pending int)
}

// Waiter is what PollUntil waits for.
type Waiter interface {
	// Done reports, without blocking, whether what is waited for is done.
	Done() bool
}

// Appender is implemented by endpoints that can encode a message straight
// into their send queue: those of tcp and shm, on their control stream
// (transport/stream). A small request/response protocol then sends without
// a buffer of registered memory, an Op, or a completion. rdma does not
// implement it: its messages leave from registered memory on the QPs.
type Appender interface {
	// AppendSend sends one message that fill appends to b, in order with
	// the endpoint's other messages. fill must append at most max bytes,
	// must not block, and must not call into the endpoint. AppendSend
	// reports false, without calling fill, when the message cannot be
	// queued at once (no receive credit left at the peer, messages waiting
	// for credit, max above the endpoint's limit for in-place messages);
	// the caller then posts it as an OpSend. An error means the endpoint
	// failed, or that fill appended more than max bytes (nothing is sent).
	AppendSend(max int, fill func(b []byte) []byte) (bool, error)
}

// Counter is implemented by endpoints that count their own operations
// (tcp's and shm's), where they already take a lock or an atomic per
// operation anyway: the engine's metrics then read these counts when they
// are scraped rather than adding to counters of their own on every
// operation.
type Counter interface {
	// Counts returns the counts so far. It may be called from any
	// goroutine, also after Close.
	Counts() Counts
}

// Counts are an endpoint's operations and bytes (Counter). Ops counts
// every operation handed to Post, by kind, whatever its outcome; Sent and
// Received count the payload bytes of those that completed without error:
// Sent those of OpWrite, OpWriteImm and OpSend, Received those of OpRead.
// Messages sent with Appender.AppendSend are not counted.
type Counts struct {
	Ops            [NumOpKinds]uint64 // by OpKind
	Sent, Received uint64
}

// Add adds o's counts to c's.
func (c *Counts) Add(o Counts) {
	for i := range c.Ops {
		c.Ops[i] += o.Ops[i]
	}
	c.Sent += o.Sent
	c.Received += o.Received
}

// Exporter is implemented by a Host whose engine exports regions (the
// descriptors its handshake's Welcome advertised). The rdma transport sends
// their rkeys with its queue pair numbers, so that a peer's first access to
// one needs no attach round trip.
type Exporter interface {
	Exports() []RegionKey
}

// Announcer is implemented by endpoints whose control stream carries
// exports (tcp's, shm's and rdma's: transport/stream). AnnounceExport tells
// the peer of a region its engine exported after the handshake: export is
// one encoded export (internal/wire's AppendExport, at most MaxExportLen
// bytes), copied before it returns. The engine calls it only for a peer
// whose handshake said that it takes exports.
type Announcer interface {
	AnnounceExport(export []byte) error
}

// ExportReceiver is implemented by a Host that takes the exports its peer
// announces (the engine's). ReceiveExport gets one encoded export, lent for
// the call, on the connection's read loop: it must not block. An error
// (a malformed export) closes the connection as a protocol violation.
type ExportReceiver interface {
	ReceiveExport(export []byte) error
}

// RegionKey names a local region that peers may access: its ID, its key and
// the rights it grants them.
type RegionKey struct {
	ID     uint32
	Key    uint64
	Access Access
}

// Resolved is memory of a local region that a remote peer is allowed to
// touch, pinned. Release must be called once the bytes have been read or
// written.
type Resolved struct {
	// Mem is the bytes the peer asked for.
	Mem []byte
	// Region is the registered region that holds Mem (its memfd, base
	// address and length, for attachments), or nil when nothing is
	// pinned.
	Region *mem.Handle
	// Staged is set when the region is device memory (a GPU's) that the
	// transport cannot touch: Mem is then a host buffer that stands for
	// it. For a READ it already holds the device's bytes; for a WRITE the
	// transport fills it and calls Commit, which places the bytes in the
	// device memory, before it acknowledges the write.
	Staged Staging
}

// Staging is a host copy of device memory (Resolved.Staged).
type Staging interface {
	// Commit copies the host buffer to the device memory it stands for.
	Commit() error
	// Release frees the host buffer.
	Release()
}

// Commit places a WRITE's bytes: for staged device memory it copies Mem to
// the device; otherwise the bytes are in place already and it does
// nothing. Call it after Mem has been filled, before Release, and
// acknowledge the write only once it has returned nil.
func (r Resolved) Commit() error {
	if r.Staged != nil {
		return r.Staged.Commit()
	}
	return nil
}

// Release unpins the region (and frees a staging buffer).
func (r Resolved) Release() {
	if r.Staged != nil {
		r.Staged.Release()
	}
	if r.Region != nil {
		r.Region.Unpin()
	}
}

// DeviceMover is implemented by endpoints that can move device memory (a
// GPU's) themselves, with the GPU's copy engines (shm, through CUDA IPC)
// or a NIC that reaches it. The engine hands every other endpoint host
// memory only: an operation whose local memory is on a GPU is staged
// through host buffers in pieces, the GPU's copies overlapping the
// transport's.
type DeviceMover interface {
	// MovesDevice reports whether the endpoint would move op, whose
	// Local lies in device memory (op.Region), itself if it were posted
	// now. It must not block. When it reports true, Post must complete
	// op without touching Local with the CPU; an endpoint that finds it
	// cannot (the remote region was revoked meanwhile) completes op with
	// an error.
	MovesDevice(op *Op) bool
}

// Registrar is implemented by a transport that registers memory with a
// device (rdma). The engine tells it of every region it registers and
// deregisters, so that the transport keeps its registrations per handle
// and releases them before the memory is unmapped.
type Registrar interface {
	// RegionAdded is called once a region is registered, before any
	// operation or peer can name it. It must not block.
	RegionAdded(h *mem.Handle)
	// RegionRemoved is called when a region is deregistered, once it is
	// retired and no access to it is in progress, before it is unmapped.
	// The transport must release what it registered for it.
	RegionRemoved(h *mem.Handle)
}

// Host is the local engine, as seen by a transport that serves requests from
// remote peers. Every remote access is checked by Resolve before any byte is
// touched.
type Host interface {
	// Resolve checks that [addr, addr+n) lies in region id, that key is the
	// region's key and that the region grants want. It returns the bytes, or
	// an error matching ErrRemoteAccess.
	Resolve(id uint32, key uint64, addr, n uint64, want Access) (Resolved, error)
	// Lookup checks key and rights like Resolve, for the whole region:
	// Mem is all of it, and Region is its handle.
	Lookup(id uint32, key uint64, want Access) (Resolved, error)
	// Deliver hands an incoming message to the receive queue. msg is valid
	// only during the call (it may lie in the transport's receive buffer):
	// the host copies what it keeps. from is where the message's credit
	// goes back (from.Consumed): the endpoint, or, for a message that came
	// over the control stream (tcp, shm), that stream, which may run
	// before Connect has returned the endpoint.
	Deliver(from Endpoint, msg []byte)
	// Notify reports that a write-with-notify has landed.
	Notify(from Endpoint, n Notification)
}

// Notification is what the target of a write-with-notify receives, once the
// data is in place: the sender's value, and where and how much was written.
// Region and Addr are zero on rdma, where the NIC reports only the value
// and the length (WRITE_WITH_IMM).
type Notification struct {
	Value  uint32
	Region uint32
	Addr   uint64
	Len    uint64
}

// Role says which side of the handshake an endpoint is on.
type Role uint8

const (
	Dialer Role = iota + 1
	Acceptor
)

// PeerInfo is what the handshake told about one side.
type PeerInfo struct {
	ID     [16]byte
	PID    int
	HostID [16]byte // equal on both sides only when both run on the same host
	Addr   string   // the address the side listens on, if any
	Blob   []byte   // transport-specific data from the handshake
}

// Params is everything a transport needs to turn a handshaken connection into
// an endpoint.
type Params struct {
	Role   Role
	Conn   net.Conn // the handshaken connection; the endpoint owns it from now on
	Local  PeerInfo
	Remote PeerInfo
	Host   Host

	// Conns is how many TCP connections the endpoint should use, including
	// Conn. DialExtra (dialer) and AcceptExtra (acceptor) supply the others.
	Conns       int
	DialExtra   func(ctx context.Context) (net.Conn, error)
	AcceptExtra func(ctx context.Context) (net.Conn, error)

	// MaxMessage is the largest OpSend payload; RecvDepth is how many
	// messages the peer may have outstanding before Send waits (credits).
	MaxMessage int
	RecvDepth  int

	// PollSpin is how long a stream's reader keeps reading a drained socket
	// before it waits in the poller; 0 or less: it waits at once.
	PollSpin time.Duration

	// OnFailover, when set, lets an endpoint whose own data path fails
	// (rdma: a queue pair in the error state, a failed post, a removed
	// device) while its control connection lives carry on over that
	// connection with the stream protocol (tcp's), without a new
	// handshake: its READs and WRITEs in flight are posted again there,
	// its messages and notifications in flight fail (the peer may have
	// had them), and the peer is told to do the same. It is called once
	// then, with the transports left and taken and the cause; it must not
	// block. Unset, such a failure takes the endpoint down. The engine
	// sets it on both sides or on neither.
	OnFailover func(from, to string, cause error)

	Logger *slog.Logger
}

// Transport builds endpoints of one kind.
type Transport interface {
	// Name is "tcp", "shm" or "rdma".
	Name() string
	// Caps is what the transport can do; the same value for its whole
	// life, before it was first used too. A transport's package exports
	// it as a variable as well (tcp.Caps, ...), for the engine's table.
	Caps() Caps
	// Available reports whether the transport can be used on this host: nil,
	// or an error matching ErrNotSupported that says why not.
	Available() error
	// LocalBlob is this side's transport-specific handshake data.
	LocalBlob() []byte
	// Usable reports whether an endpoint to the remote side can be built,
	// judging by the handshake (for example: same host for shm).
	Usable(local, remote PeerInfo) error
	// Connect builds the endpoint. Both sides call it after the handshake
	// chose this transport.
	Connect(ctx context.Context, p Params) (Endpoint, error)
	// Devices describes the devices the transport has open, for status
	// and metrics, without opening one: the zero Devices for a transport
	// that opens none. It may be called from any goroutine.
	Devices() Devices
}
