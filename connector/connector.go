package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
)

// Role says which side of a pipeline stage a Connector plays.
type Role uint8

// The roles.
const (
	// RoleBoth puts and gets: the middle stage of a pipeline. The zero Role.
	RoleBoth Role = iota
	// RoleProducer only puts; consumers dial it, so it must listen.
	RoleProducer
	// RoleConsumer only gets; it dials producers and need not listen.
	RoleConsumer
)

func (r Role) String() string {
	switch r {
	case RoleBoth:
		return "both"
	case RoleProducer:
		return "producer"
	case RoleConsumer:
		return "consumer"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ParseRole parses "producer", "consumer" or "both" ("" means both).
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case "producer":
		return RoleProducer, nil
	case "consumer":
		return RoleConsumer, nil
	}
	return 0, fmt.Errorf("unknown role %q: want producer, consumer or both", s)
}

// Pull says how a value crosses from the producer's pool to the consumer's.
type Pull uint8

// The ways to pull.
const (
	// PullAuto is PullWrite, the faster of the two on every transport (see
	// docs/CONNECTOR.md). The zero Pull.
	PullAuto Pull = iota
	// PullRead: the producer answers a get with the slot's address and the
	// consumer READs the value, in pieces, into its pool.
	PullRead
	// PullWrite: the consumer's get carries a buffer of its pool and the
	// producer WRITEs the value into it, the last piece with a notification.
	PullWrite
)

func (p Pull) String() string {
	switch p {
	case PullAuto:
		return "auto"
	case PullRead:
		return "read"
	case PullWrite:
		return "write"
	}
	return fmt.Sprintf("Pull(%d)", uint8(p))
}

// ParsePull parses "auto", "read" or "write" ("" means auto).
func ParsePull(s string) (Pull, error) {
	switch s {
	case "", "auto":
		return PullAuto, nil
	case "read":
		return PullRead, nil
	case "write":
		return PullWrite, nil
	}
	return 0, fmt.Errorf("unknown pull %q: want auto, read or write", s)
}

// Defaults.
const (
	DefaultTTL       = 5 * time.Minute
	DefaultChunkSize = 4 << 20
	// WriteChunkSize is the default piece of a value a producer WRITEs,
	// on every transport: each cuts one large operation into slices over
	// its connections or queue pairs itself (the verbs transport over its
	// queue pairs, tcp over its bulk connections), so more pieces only add
	// completions. Over SoftRoCE a 16 MiB Get in 4 MiB pieces ran at
	// 0.88-0.91x of one 16 MiB WRITE, and in one piece at 0.96-1.01x (4
	// interleaved rounds in one VM run).
	WriteChunkSize = 1 << 30
	// RDMAWriteChunkSize is WriteChunkSize.
	//
	// Deprecated: the producer's default WRITE piece no longer depends on
	// the transport; use WriteChunkSize.
	RDMAWriteChunkSize = WriteChunkSize
)

// Config configures a Connector. The zero value of every field means its
// documented default.
type Config struct {
	// Engine configures the engine the connector owns: the pool size
	// (MemoryMB, which holds the values a producer keeps and the buffers
	// a consumer receives into), the listen address (Listen, Advertise),
	// the transport policy (Transport), the RDMA device (RDMA.Device) and
	// the shared secret (Secret). The library reads no environment
	// variables: the xfer command sets RDMA.Device from RDMA_DEVICE_NAME.
	Engine xfer.Config
	// Role is producer, consumer or both. A producer (or both) must
	// listen: consumers dial the address in its metadata. Default: both.
	Role Role
	// Producer is the producer a Get dials when it is given no metadata,
	// or metadata without a producer address. Default: none.
	Producer string
	// TTL is how long a producer keeps a value no consumer has taken, and
	// how long a consumer may hold a claim on one without finishing; then
	// the slot is reclaimed. Negative means never. Default: 5 minutes.
	TTL time.Duration
	// Pull is how a Get moves the value. Default: auto (write).
	Pull Pull
	// ChunkSize is the piece a large value is split into; the pieces are
	// in flight together. Default: 4 MiB, except for a producer's WRITEs,
	// which go in pieces of 1 GiB (WriteChunkSize) that the transport
	// slices over its connections or queue pairs itself.
	ChunkSize int
	// WaitForMemory makes Put, the Alloc methods and Get wait, bounded by
	// their ctx, for pool memory to be released instead of failing at once
	// with ErrPoolExhausted. Default: false.
	WaitForMemory bool
	// CallTimeout, when set, is the longer bound that rides through a
	// producer's restart: each Get, Put and Alloc whose ctx has no
	// deadline waits up to it (a Get still waiting then probes the
	// producer for up to op_timeout), and a Get waits for a producer that
	// is down (refuses connections) up to it too, rather than for the
	// engine's reconnect_wait. Use it where a consumer would rather wait
	// out a producer's restart, or a key put late, than fail; 3 ×
	// op_timeout (30 s) was the default before. Negative: no bound, a
	// call waits as long as its ctx. Default (0): calls fail fast: a
	// producer that refuses connections fails a Get after reconnect_wait
	// (2 s), and a call without a deadline ends within op_timeout (10 s):
	// a Get still waiting fails with a *StalledError when the producer
	// does not answer a probe either (it stopped, hung or died), or else
	// with ErrNotFound (the key was not put in time).
	CallTimeout time.Duration
	// WaitSpin is how long a Get's caller waits on its CPU for the
	// producer's answer before its thread sleeps. A goroutine needs none
	// (the default: 0 or negative): when it waits, the Go scheduler runs
	// other work on its thread, and the answer's goroutine wakes it
	// cheaply. A caller on a thread of its own -- a call through the C ABI,
	// as the Python package makes, or a goroutine under
	// runtime.LockOSThread -- has its thread put to sleep at once, and
	// waking a sleeping thread costs tens of µs: for those callers a spin
	// about as long as a small Get (ThreadWaitSpin, the C ABI's default)
	// answers from the CPU instead. The spin needs a second P for the
	// answer's work, so it is skipped when GOMAXPROCS is 1, and while
	// other Gets of the process wait (they wait at once); a Get that spins
	// ends at the latest WaitSpin after its ctx.
	WaitSpin time.Duration
	// Logger receives the connector's logs; the engine's too unless
	// Engine.Logger is set. Default: the engine's default logger.
	Logger *slog.Logger
}

// Errors. Match them with errors.Is; the errors returned say more.
var (
	// ErrPoolExhausted means the pool has no room for the value.
	ErrPoolExhausted = xfer.ErrPoolExhausted
	// ErrNotFound means the producer has no value under the key (or had
	// none before the Get's ctx ended).
	ErrNotFound = errors.New("key not found")
	// ErrRole means the operation does not belong to the connector's role.
	ErrRole = errors.New("not this connector's role")
	// ErrTooLarge means a value does not fit the pool at all.
	ErrTooLarge = xfer.ErrTooLarge
	// ErrReleased means a Buffer was used after Release or PutBuffer.
	ErrReleased = errors.New("buffer released")
	// ErrProtocol means the other side broke the control protocol.
	ErrProtocol = xfer.ErrProtocol
)

// ThreadWaitSpin is the WaitSpin the C ABI (and so the Python package)
// uses unless configured otherwise: on a shared 2-vCPU host it took a
// 4 KiB put+get from a goroutine locked to its thread from 42-106 µs to
// about 35 µs at p50 (docs/TUNING.md, "A Get on a thread of its own").
const ThreadWaitSpin = 50 * time.Microsecond

// Connector puts values for consumers and gets values from producers. Its
// methods are safe for concurrent use.
type Connector struct {
	cfg  Config
	eng  *xfer.Engine
	log  *slog.Logger
	pull Pull

	bound time.Duration // the call bound (callTimeout); 0: none
	// probeWait is how long a Get at the bound waits for its producer's
	// answer to a probe (callTimeout).
	probeWait time.Duration
	calls     *callbound.Bounder // bounds calls by bound
	spin      time.Duration      // Config.WaitSpin; 0: none (also with GOMAXPROCS 1)
	ctx       context.Context    // ends at Close (or Stop)
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	ctrl      *ctrlPool
	stopOnce  sync.Once

	mu     sync.Mutex
	closed bool
	slots  map[string]*slot
	wait   map[string][]*waiter // gets waiting for a put, by key
	claims map[claimKey]*claim
	remote map[*xfer.Peer]*remote // producers this connector dialed

	stats stats
	down  atomic.Bool // Close (not Stop) began: memory is going away

	chunkAuto bool // ChunkSize was left to its default
	// inline: the pool is host memory, so small values may travel inline
	// in control messages, copied by the CPU on the receive path.
	inline bool
}

type stats struct {
	puts, gets, bytesPut, bytesGot, errors, timeouts, expired, served, peersLost atomic.Int64
	// lastErr is the message of the last failed operation, cleared by the
	// next one that succeeds ("" when none).
	lastErr atomic.Pointer[string]
}

// failed records err as the last operation's failure. Waits that end
// without a value (a key not put in time, a caller's deadline) are an
// answer, not a fault, and clear it like a success.
func (s *stats) failed(err error) {
	if errors.Is(err, ErrNotFound) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		s.lastErr.Store(nil)
		return
	}
	msg := err.Error()
	s.lastErr.Store(&msg)
}

// succeeded clears the last failure.
func (s *stats) succeeded() {
	if s.lastErr.Load() != nil {
		s.lastErr.Store(nil)
	}
}

// Health is a snapshot of a connector's counters and pool.
type Health struct {
	Role     string `json:"role"`
	Addr     string `json:"addr,omitempty"`   // where consumers reach this producer
	Puts     int64  `json:"puts"`             // successful Puts and PutBuffers
	Gets     int64  `json:"gets"`             // successful Gets
	BytesPut int64  `json:"bytes_put"`        // bytes stored by Puts
	BytesGot int64  `json:"bytes_got"`        // bytes received by Gets
	Served   int64  `json:"served"`           // values consumers took from this producer
	Errors   int64  `json:"errors"`           // failed Puts and Gets, timeouts included
	Timeouts int64  `json:"timeouts"`         // Gets whose ctx ended first
	Expired  int64  `json:"expired"`          // slots and claims reclaimed by the TTL
	Slots    int    `json:"slots"`            // values stored now
	Waiting  int    `json:"waiting"`          // consumers' gets waiting for a put
	PoolSize int64  `json:"pool_bytes"`       // the pool's capacity
	PoolUsed int64  `json:"pool_used_bytes"`  // bytes allocated in it
	Closed   bool   `json:"closed,omitempty"` // Close was called
	// PeersLost counts consumers whose connection failed while they had
	// gets or claims open here.
	PeersLost int64 `json:"peers_lost"`
	// LastError is the last failed operation's message, until an
	// operation succeeds.
	LastError string `json:"last_error,omitempty"`
	// Status is "healthy", "unhealthy" (Problems says why) or "closed".
	Status   string   `json:"status"`
	Problems []string `json:"problems,omitempty"`
}

// waitSpin is the spin a Get makes: none when asked for none, or when the
// process has one P (the spin would hold the only one the answer needs).
// A Get spins only while it is the only one waiting in the process
// (getWaiters, over every connector that spins): with several callers
// waiting, a spinner would hold a P the others' answers need, and the
// process is awake anyway: 4 callers on threads of their own on 2 Ps
// (BenchmarkPutGet4KThreads) took 68-69 µs a put+get with one of them
// spinning at a time against 33-37 µs with none, on a loaded host; with
// this rule 34-40 µs against 36-41 µs, at a quiet minute.
func waitSpin(d time.Duration) time.Duration {
	if d <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	return d
}

// Engine is the engine the connector owns, for its address, peers and
// statistics. Closing it closes the connector's transfers.
func (c *Connector) Engine() *xfer.Engine { return c.eng }

// Addr is the address consumers dial to reach this producer ("" for
// a consumer that does not listen).
func (c *Connector) Addr() string { return c.eng.Addr() }

// Role is the connector's role.
func (c *Connector) Role() Role { return c.cfg.Role }

// Pull is how this connector's Gets move values (auto resolved).
func (c *Connector) Pull() Pull { return c.pull }

// Health returns the connector's counters and pool use.
func (c *Connector) Health() Health {
	h := Health{
		Role:     c.cfg.Role.String(),
		Addr:     c.eng.Addr(),
		Puts:     c.stats.puts.Load(),
		Gets:     c.stats.gets.Load(),
		BytesPut: c.stats.bytesPut.Load(),
		BytesGot: c.stats.bytesGot.Load(),
		Served:   c.stats.served.Load(),
		Errors:   c.stats.errors.Load(),
		Timeouts: c.stats.timeouts.Load(),
		Expired:  c.stats.expired.Load(),
	}
	c.mu.Lock()
	h.Slots = len(c.slots)
	for _, ws := range c.wait {
		h.Waiting += len(ws)
	}
	h.Closed = c.closed
	c.mu.Unlock()
	h.PeersLost = c.stats.peersLost.Load()
	if e := c.stats.lastErr.Load(); e != nil {
		h.LastError = *e
	}
	if !h.Closed {
		ps := c.eng.Pool().Stats()
		h.PoolSize, h.PoolUsed = int64(ps.Capacity), int64(ps.InUse)
	}
	h.Status, h.Problems = h.judge()
	return h
}

// judge says whether h is healthy, and if not why: a closed connector, a
// pool with no byte free (the next put or get of a value fails or waits),
// or a last operation that failed. Lost peers are counted, not judged: a
// consumer that went away is the consumer's fault.
func (h Health) judge() (string, []string) {
	if h.Closed {
		return "closed", []string{"the connector is closed"}
	}
	var p []string
	if h.PoolSize > 0 && h.PoolUsed >= h.PoolSize {
		p = append(p, fmt.Sprintf("the pool is full (%d of %d bytes in use)", h.PoolUsed, h.PoolSize))
	}
	if h.LastError != "" {
		p = append(p, "the last operation failed: "+h.LastError)
	}
	if len(p) > 0 {
		return "unhealthy", p
	}
	return "healthy", nil
}

// errClosed is the error of a call on a closed connector.
func (c *Connector) errClosed(op string) error {
	return fmt.Errorf("connector: %s: %w", op, net.ErrClosed)
}

// isClosed reports whether Close was called.
func (c *Connector) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// slotKey names a value in a producer: the stages and the caller's key.
// Stage names may not contain '/', which separates them.
func slotKey(from, to, key string) (string, error) {
	switch {
	case strings.Contains(from, "/"):
		return "", fmt.Errorf("connector: stage %q: a stage name may not contain '/'", from)
	case strings.Contains(to, "/"):
		return "", fmt.Errorf("connector: stage %q: a stage name may not contain '/'", to)
	case key == "":
		return "", errors.New("connector: empty key")
	}
	k := from + "/" + to + "/" + key
	if len(k) > MaxKeyLen {
		return "", fmt.Errorf("connector: key of %d bytes with its stages: at most %d", len(k), MaxKeyLen)
	}
	return k, nil
}

// ctrlPool holds the registered blocks control messages leave from when
// they cannot be appended straight into a transport's queue.
type ctrlPool struct {
	region *xfer.Region
	free   chan []byte
}

const ctrlBlocks = 64

func newCtrlPool(eng *xfer.Engine) (*ctrlPool, error) {
	r, err := eng.NewRegion(ctrlBlocks*maxControl, xfer.AccessRead)
	if err != nil {
		return nil, fmt.Errorf("control messages' memory: %w", err)
	}
	p := &ctrlPool{region: r, free: make(chan []byte, ctrlBlocks)}
	b := r.Bytes()
	for i := range ctrlBlocks {
		p.free <- b[i*maxControl : (i+1)*maxControl : (i+1)*maxControl]
	}
	return p, nil
}

// appender appends msg for Peer.TrySendAppend, through fill (its append,
// bound once): a send builds no closure.
type appender struct {
	msg  []byte
	fill func(b []byte) []byte
}

func (a *appender) append(b []byte) []byte { return append(b, a.msg...) }

var appenders = sync.Pool{New: func() any {
	a := &appender{}
	a.fill = a.append
	return a
}}

// send sends the control message msg, straight into the transport's queue
// where it can, else from a registered block.
func (c *Connector) send(ctx context.Context, p *xfer.Peer, msg []byte) error {
	if len(msg) > maxControl {
		return fmt.Errorf("connector: control message of %d bytes: %w", len(msg), ErrTooLarge)
	}
	a := appenders.Get().(*appender)
	a.msg = msg
	ok, err := p.TrySendAppend(maxControl, a.fill)
	a.msg = nil
	appenders.Put(a)
	if ok || err != nil {
		return err
	}
	// The block's memory goes with the engine: Close takes every block
	// back before it closes the engine, so a sender holding one must end
	// when Close begins.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	var b []byte
	select {
	case b = <-c.ctrl.free:
	case <-ctx.Done():
		if c.ctx.Err() != nil {
			return net.ErrClosed
		}
		return context.Cause(ctx)
	}
	defer func() { c.ctrl.free <- b }()
	return p.Send(ctx, append(b[:0], msg...))
}
