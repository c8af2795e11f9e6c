package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
	"github.com/xferio/xfer/mooncake/masterdata"
)

// Mooncake's store client (MooncakeDistributedStore, for
// python/xfer/mooncake/store.py): a transfer engine (mcEngine) with two
// managed buffers, and the master (`xfer mooncake master`) on gRPC.
//
//   - The global segment (global_segment_size) is this client's share of
//     the pool: it is mounted at the master, which places objects that any
//     client puts in it; peers WRITE and READ it at its addresses.
//   - The local buffer (local_buffer_size) stages the bytes of put and get
//     (a Python bytes object is not registered memory); put_from and
//     get_into move registered memory of the caller's (register_buffer)
//     directly.
//
// A put asks the master for replica places (PutStart), WRITEs the value to
// each (a copy when the place is in this client's own segment), and
// commits (PutEnd); on any failure it revokes (PutRevoke), and the key
// keeps what it had. A get asks for the replica list, which grants a read
// lease, and READs from the first replica that answers; bytes that arrive
// after the lease ended are dropped (LEASE_EXPIRED), since the master may
// have handed the place to another object by then.
//
// master_server_addr is one master's HOST:PORT, or, as Mooncake's HA
// mode spells it, etcd://HOST:PORT[;HOST:PORT] where masters elect a
// leader (`xfer mooncake master --enable_ha`): the client follows the
// leader (master.DialLeader, cluster MC_STORE_CLUSTER_ID) and mounts its
// segment again at each new one; calls in flight during a failover fail
// with RPC_FAIL.
//
// Results are Mooncake's store error codes (types.h's ErrorCode), not the
// transfer engine's.

// Mooncake's store error codes.
const (
	scOK              int32 = 0
	scInternal        int32 = -1
	scBufferOverflow  int32 = -10
	scNoSpace         int32 = -200 // NO_AVAILABLE_HANDLE
	scInvalidKey      int32 = -400
	scInvalidParams   int32 = -600
	scInvalidWrite    int32 = -700
	scInvalidRead     int32 = -701
	scNotReady        int32 = -703 // REPLICA_IS_NOT_READY
	scNotFound        int32 = -704 // OBJECT_NOT_FOUND
	scAlreadyExists   int32 = -705 // OBJECT_ALREADY_EXISTS
	scHasLease        int32 = -706 // OBJECT_HAS_LEASE
	scLeaseExpired    int32 = -707
	scTransferFail    int32 = -800
	scRPCFail         int32 = -900
	scSegmentNotFound int32 = -101
)

// storeError is a failure with its Mooncake store code.
type storeError struct {
	code int32
	msg  string
}

func (e *storeError) Error() string { return e.msg }

func serr(code int32, format string, args ...any) error {
	return &storeError{code: code, msg: fmt.Sprintf("mooncake store: "+format, args...)}
}

// storeCode is err's Mooncake store code.
func storeCode(err error) int32 {
	if err == nil {
		return scOK
	}
	var se *storeError
	if errors.As(err, &se) {
		return se.code
	}
	switch {
	case errors.Is(err, errInvalid):
		return scInvalidParams
	case errors.Is(err, errNotRegistered):
		return scInvalidParams
	case errors.Is(err, errMemory):
		return scNoSpace
	}
	return scTransferFail
}

// Bounds of the store's input.
const (
	// storeMaxKey is the longest key, in bytes (the master refuses longer).
	storeMaxKey = 4096
	// storeMaxReplicas is the most replicas an object may ask for.
	storeMaxReplicas = 16
	// storePortLo and storePortHi bound the port a client listens on when
	// its local_hostname names none, as Mooncake's client picks one.
	storePortLo, storePortHi = 12300, 14300
)

// storeConfig is setup's arguments.
type storeConfig struct {
	LocalHostname     string `json:"local_hostname"`
	MetadataServer    string `json:"metadata_server"`
	GlobalSegmentSize int64  `json:"global_segment_size"`
	LocalBufferSize   int64  `json:"local_buffer_size"`
	Protocol          string `json:"protocol"`
	RDMADevices       string `json:"rdma_devices"`
	MasterServerAddr  string `json:"master_server_addr"`
}

// replicateConfig is a put's ReplicateConfig.
type replicateConfig struct {
	ReplicaNum        int      `json:"replica_num"`
	SoftPin           bool     `json:"with_soft_pin"`
	KeepSoftPin       bool     `json:"keep_soft_pin"`
	SoftPinTTLms      uint64   `json:"soft_pin_ttl_ms"`
	HardPin           bool     `json:"with_hard_pin"`
	PreferredSegments []string `json:"preferred_segments"`
	PreferredSegment  string   `json:"preferred_segment"`
}

// parseReplicate reads a ReplicateConfig's JSON form (store.py's
// ReplicateConfig._json) and checks it.
func parseReplicate(doc []byte) (*replicateConfig, error) {
	var c replicateConfig
	if err := json.Unmarshal(doc, &c); err != nil {
		return nil, serr(scInvalidParams, "the replicate config: %v", err)
	}
	if _, err := c.pb(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *replicateConfig) pb() (*masterpb.ReplicateConfig, error) {
	if c == nil { // Mooncake's default: one replica, an upsert keeps the soft pin (PRESERVE)
		return &masterpb.ReplicateConfig{ReplicaNum: 1, KeepSoftPin: true}, nil
	}
	if c.ReplicaNum < 0 || c.ReplicaNum > storeMaxReplicas {
		return nil, serr(scInvalidParams, "replica_num %d: want 1 to %d", c.ReplicaNum, storeMaxReplicas)
	}
	pref := c.PreferredSegments
	if c.PreferredSegment != "" {
		pref = append([]string{c.PreferredSegment}, pref...)
	}
	return &masterpb.ReplicateConfig{ReplicaNum: uint32(max(c.ReplicaNum, 1)), SoftPin: c.SoftPin,
		KeepSoftPin: c.KeepSoftPin, SoftPinTtlMs: c.SoftPinTTLms, HardPin: c.HardPin, PreferredSegments: pref}, nil
}

// masterConn is the master's client: one master's (master.Dial), or the
// leader's among masters that elect one in etcd (master.DialLeader).
type masterConn interface {
	masterpb.MasterClient
	Close() error
}

// mcStore is a set-up store client.
type mcStore struct {
	m      *mcEngine
	engine int64 // m's handle
	id     []byte
	master masterConn // gRPC: always there
	// newLeader tells the pinger that the master's leader changed.
	newLeader chan struct{}
	data      atomic.Pointer[masterdata.Client] // the data plane, when the master offers one
	dataPort  atomic.Uint32                     // the master's data-plane port (Ping)
	addr      atomic.Pointer[string]            // the (leading) master's address
	seg       []byte                            // the global segment: this client's share of the pool
	segBase   uintptr
	segSize   int64
	stage     *mem.Pool // over the local buffer; nil when it is empty
	stageR    *mem.Region
	timeout   time.Duration // each master call's bound
	ctx       context.Context
	cancel    context.CancelFunc
	bg        sync.WaitGroup
	calls     sync.WaitGroup
	mu        sync.Mutex
	gets      map[int64]mem.Buffer // staged get results handed out
	closed    bool
	hostname  string
}

var (
	storeMu sync.Mutex
	stores  = map[int64]*mcStore{}
)

// storeOpen sets a client up: an engine listening on local_hostname
// (host:port, or host and a free port in [12300, 14300]), its segment and
// local buffer, and the master's connection, with the segment mounted.
// parseStoreConfig reads setup's arguments (their JSON form, from
// store.py) and checks them; etcd lists the masters' etcd when they
// elect a leader.
func parseStoreConfig(doc []byte) (c storeConfig, etcd []string, err error) {
	if err := json.Unmarshal(doc, &c); err != nil {
		return c, nil, serr(scInvalidParams, "setup: %v", err)
	}
	if c.GlobalSegmentSize < 0 || c.LocalBufferSize < 0 || c.GlobalSegmentSize > 1<<40 || c.LocalBufferSize > 1<<40 {
		return c, nil, serr(scInvalidParams, "global_segment_size %d, local_buffer_size %d: want 0 to 1 TiB each", c.GlobalSegmentSize, c.LocalBufferSize)
	}
	if c.MasterServerAddr == "" {
		c.MasterServerAddr = "127.0.0.1:50051"
	}
	if scheme, _, ok := strings.Cut(c.MasterServerAddr, "://"); ok {
		if scheme != "etcd" {
			return c, nil, serr(scInvalidParams, "master_server_addr %q: want HOST:PORT or etcd://HOST:PORT[;HOST:PORT] (xfer's masters elect their leader in etcd only)", c.MasterServerAddr)
		}
		var err error
		if etcd, err = master.ParseEtcdEndpoints(c.MasterServerAddr); err != nil {
			return c, nil, serr(scInvalidParams, "master_server_addr: %v", err)
		}
	} else if _, _, err := net.SplitHostPort(c.MasterServerAddr); err != nil {
		return c, nil, serr(scInvalidParams, "master_server_addr %q: want HOST:PORT or etcd://HOST:PORT[;HOST:PORT]", c.MasterServerAddr)
	}
	if c.MetadataServer != "" && c.MetadataServer != "P2PHANDSHAKE" {
		if _, err := checkMetadata(c.MetadataServer); err != nil {
			return c, nil, serr(scInvalidParams, "%v", err)
		}
	}
	if c.Protocol == "" {
		c.Protocol = "tcp"
	}
	return c, etcd, nil
}

func storeOpen(doc []byte) (int64, error) {
	c, etcd, err := parseStoreConfig(doc)
	if err != nil {
		return 0, err
	}
	h, err := storeEngine(c)
	if err != nil {
		return 0, err
	}
	m, done, _ := useMC(h)
	done()
	s := &mcStore{m: m, engine: h, id: make([]byte, 16), timeout: 10 * time.Second, gets: map[int64]mem.Buffer{}, hostname: m.segment,
		newLeader: make(chan struct{}, 1)}
	rand.Read(s.id)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	fail := func(err error) (int64, error) {
		s.cancel()
		if s.master != nil {
			s.master.Close()
		}
		mcClose(h)
		return 0, err
	}
	if c.GlobalSegmentSize > 0 {
		p, err := m.allocManaged(c.GlobalSegmentSize)
		if err != nil {
			return fail(serr(scNoSpace, "the global segment of %d bytes: %v", c.GlobalSegmentSize, err))
		}
		s.seg, s.segBase, s.segSize = m.managedBytes(p), p, c.GlobalSegmentSize
	}
	if c.LocalBufferSize > 0 {
		p, err := m.allocManaged(c.LocalBufferSize)
		if err != nil {
			return fail(serr(scNoSpace, "the local buffer of %d bytes: %v", c.LocalBufferSize, err))
		}
		if s.stageR, err = mem.WrapRegion(m.managedBytes(p)); err == nil {
			s.stage, err = mem.NewPool(s.stageR, mem.PoolOptions{MinAlign: 64})
		}
		if err != nil {
			return fail(serr(scInternal, "the local buffer's allocator: %v", err))
		}
	}
	secret, err := master.SecretFrom(getenv)
	if err != nil {
		return fail(serr(scInvalidParams, "%v", err))
	}
	do := master.DialOptions{OpTimeout: s.timeout, Secret: secret}
	if etcd != nil {
		// Follow the leader; a new one is told the segment at once.
		lc, err := master.DialLeader(s.ctx, etcd, master.LeaderOptions{DialOptions: do, Cluster: getenv("MC_STORE_CLUSTER_ID"),
			Logger: slog.New(slog.DiscardHandler), // the library prints nothing
			OnLeader: func(addr string) {
				s.addr.Store(&addr)
				if d := s.data.Swap(nil); d != nil {
					d.Close() // the old leader's: the next ping dials the new one's
				}
				select {
				case s.newLeader <- struct{}{}:
				default:
				}
			}})
		if err != nil {
			return fail(serr(scRPCFail, "%v", err))
		}
		s.master = lc
	} else {
		mc, err := master.Dial(s.ctx, c.MasterServerAddr, do)
		if err != nil {
			return fail(serr(scRPCFail, "%v", err))
		}
		s.master = mc
	}
	if etcd == nil {
		addr := c.MasterServerAddr
		s.addr.Store(&addr)
	}
	if err := s.mount(); err != nil {
		return fail(err)
	}
	if s.segSize > 0 { // mount pinged already when there is no segment
		if _, err := s.ping(); err != nil {
			return fail(err)
		}
	}
	s.dialData()
	s.bg.Add(1)
	go s.pinger()
	id := newHandle()
	storeMu.Lock()
	stores[id] = s
	storeMu.Unlock()
	return id, nil
}

// storeEngine opens the client's transfer engine on local_hostname: on its
// port if it names one, else on a free one in [storePortLo, storePortHi].
func storeEngine(c storeConfig) (int64, error) {
	host := c.LocalHostname
	if host == "" {
		return 0, serr(scInvalidParams, "local_hostname is empty")
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		h, err := mcOpen(host, "P2PHANDSHAKE", c.Protocol, c.RDMADevices)
		if err != nil {
			return 0, serr(scInvalidParams, "%v", err)
		}
		return h, nil
	}
	var last error
	for try := 0; try < 32; try++ {
		port := storePortLo + mrand.IntN(storePortHi-storePortLo+1)
		h, err := mcOpen(net.JoinHostPort(host, strconv.Itoa(port)), "P2PHANDSHAKE", c.Protocol, c.RDMADevices)
		if err == nil {
			return h, nil
		}
		last = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return 0, serr(scInvalidParams, "%v", last)
}

// call bounds a master call by the client's timeout.
func (s *mcStore) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.timeout)
}

// rpcErr is a failed master call.
func rpcErr(what string, err error) error {
	return serr(scRPCFail, "%s: the master: %v", what, err)
}

// codeErr is a master's answer that is not 0.
func codeErr(what string, code int32, msg string) error {
	if msg == "" {
		msg = fmt.Sprintf("code %d", code)
	}
	return serr(code, "%s: %s", what, msg)
}

// mount mounts the client's segment (when it has one).
func (s *mcStore) mount() error {
	if s.segSize == 0 {
		_, err := s.ping()
		return err
	}
	ctx, cancel := s.call()
	defer cancel()
	r, err := s.mc().MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: s.id,
		Segment: &masterpb.Segment{Name: s.m.segment, Base: uint64(s.segBase), Size: uint64(s.segSize)}})
	if err != nil {
		return rpcErr("mount the segment", err)
	}
	if r.Code != 0 {
		return codeErr("mount the segment", r.Code, r.Message)
	}
	return nil
}

// ping tells the master the client lives, and returns how long it waits.
func (s *mcStore) ping() (*masterpb.PingResponse, error) {
	ctx, cancel := s.call()
	defer cancel()
	r, err := s.mc().Ping(ctx, &masterpb.PingRequest{ClientId: s.id})
	if err != nil {
		return nil, rpcErr("ping", err)
	}
	s.dataPort.Store(r.DataPort)
	return r, nil
}

// dataSpin is how long a call polls for the master's answer before its
// thread sleeps: a caller through the C ABI is on a thread of its own,
// which a wake-up costs tens of µs (connector.ThreadWaitSpin).
const dataSpin = 50 * time.Microsecond

// mc is the master's client: its data plane while the connection holds,
// else gRPC.
func (s *mcStore) mc() masterpb.MasterClient {
	if d := s.data.Load(); d != nil {
		select {
		case <-d.Down():
		default:
			return d
		}
	}
	return s.master
}

// dialData connects to the master's data plane when it offers one and
// the client has none (or lost it); calls keep to gRPC until it is up.
func (s *mcStore) dialData() {
	port := s.dataPort.Load()
	if port == 0 {
		return
	}
	if d := s.data.Load(); d != nil {
		select {
		case <-d.Down():
		default:
			return
		}
	}
	addr := s.addr.Load()
	if addr == nil {
		return
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return
	}
	ctx, cancel := s.call()
	defer cancel()
	d, err := masterdata.Dial(ctx, s.m.e, net.JoinHostPort(host, strconv.Itoa(int(port))),
		masterdata.Options{OpTimeout: s.timeout, Spin: dataSpin, Fallback: s.master})
	if err != nil {
		return // gRPC serves; the next ping tries again
	}
	if old := s.data.Swap(d); old != nil {
		old.Close()
	}
}

// pinger pings the master a few times a client TTL, and mounts the
// segment again when the master no longer knows the client (it restarted,
// or took the client for dead) or a new leader was elected (a no-op when
// it loaded the segment).
func (s *mcStore) pinger() {
	defer s.bg.Done()
	every := time.Second
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.newLeader:
			s.mount()
			continue
		case <-time.After(every):
		}
		r, err := s.ping()
		if err != nil {
			continue
		}
		if ttl := time.Duration(r.ClientTtlMs) * time.Millisecond; ttl > 0 {
			every = min(max(ttl/4, 50*time.Millisecond), time.Second)
		}
		if r.Remount {
			s.mount()
		}
		s.dialData()
	}
}

// useStore is the store h, counted as in use until done is called.
func useStore(h int64) (*mcStore, func(), error) {
	storeMu.Lock()
	defer storeMu.Unlock()
	s, ok := stores[h]
	if !ok {
		return nil, nil, serr(scInvalidParams, "store handle %d: closed (or never set up)", h)
	}
	s.calls.Add(1)
	return s, s.calls.Done, nil
}

// storeClose unmounts the segment and closes the client. Idempotent.
func storeClose(h int64) error {
	storeMu.Lock()
	s, ok := stores[h]
	delete(stores, h)
	storeMu.Unlock()
	if !ok {
		return nil
	}
	s.calls.Wait()
	var err error
	if s.segSize > 0 {
		ctx, cancel := s.call()
		r, e := s.mc().UnmountSegment(ctx, &masterpb.UnmountSegmentRequest{ClientId: s.id, Name: s.m.segment})
		cancel()
		if e != nil {
			err = rpcErr("unmount the segment", e)
		} else if r.Code != 0 {
			err = codeErr("unmount the segment", r.Code, r.Message)
		}
	}
	s.cancel()
	s.bg.Wait()
	if d := s.data.Load(); d != nil {
		d.Close()
	}
	s.mu.Lock()
	s.closed = true
	s.gets = nil
	s.mu.Unlock()
	return errors.Join(err, s.master.Close(), mcClose(s.engine))
}

// checkKey refuses an empty or too long key.
func checkKey(k string) error {
	if k == "" || len(k) > storeMaxKey {
		return serr(scInvalidKey, "key of %d bytes: want 1 to %d", len(k), storeMaxKey)
	}
	return nil
}

// stageAlloc takes n bytes of the local buffer.
func (s *mcStore) stageAlloc(n int64) (mem.Buffer, error) {
	if s.stage == nil {
		return mem.Buffer{}, serr(scInvalidParams, "%d bytes to stage: the local buffer is empty (local_buffer_size 0): use put_from and get_into with registered buffers", n)
	}
	b, err := s.stage.Alloc(int(n))
	if err != nil {
		return mem.Buffer{}, serr(scNoSpace, "%d bytes to stage in the local buffer: %v", n, err)
	}
	return b, nil
}

// own reports whether seg is this client's own segment.
func (s *mcStore) own(seg string) bool { return seg == s.m.segment }

// moveReplica moves n bytes between local memory at p and a replica: a
// copy in this client's own segment, a transfer otherwise.
func (s *mcStore) moveReplica(kind xfer.OpKind, p unsafe.Pointer, r *masterpb.Replica, off, n uint64) error {
	if off+n > r.Size || off+n < off {
		return serr(scInvalidParams, "bytes [%d, %d) of a replica of %d", off, off+n, r.Size)
	}
	addr := r.Address + off
	if s.own(r.Segment) {
		if addr < uint64(s.segBase) || addr+n > uint64(s.segBase)+uint64(s.segSize) {
			return serr(scInvalidReplica, "replica [%#x, +%d) outside this client's segment", addr, n)
		}
		seg := s.seg[addr-uint64(s.segBase):][:n]
		if kind == xfer.OpWrite {
			copy(seg, memAt(p, int64(n)))
		} else {
			copy(memAt(p, int64(n)), seg)
		}
		return nil
	}
	codes := []int32{0}
	if err := s.m.transferSync(r.Segment, kind, []mcXfer{{local: p, remote: addr, n: int64(n)}}, codes, nil); err != nil {
		return serr(scTransferFail, "%d bytes with %s: %v", n, r.Segment, err)
	}
	return nil
}

// scInvalidReplica is Mooncake's INVALID_REPLICA.
const scInvalidReplica int32 = -702

// put stores n bytes at p under key. With staged, p is the caller's
// memory, copied into the local buffer first; without, it must lie in a
// registered buffer. An existing key keeps its value and the put
// succeeds, as in Mooncake; upsert replaces it.
func (s *mcStore) put(key string, p unsafe.Pointer, n int64, cfg *replicateConfig, staged, upsert bool) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if n <= 0 || (p == nil && n > 0) {
		return serr(scInvalidParams, "put %q: %d bytes: want a positive size and a buffer", key, n)
	}
	rc, err := cfg.pb()
	if err != nil {
		return err
	}
	src := p
	if staged {
		b, err := s.stageAlloc(n)
		if err != nil {
			return err
		}
		defer s.stage.Free(b)
		copy(b.Bytes(), memAt(p, n))
		src = unsafe.Pointer(unsafe.SliceData(b.Bytes()))
	} else if !s.registered(p, n) {
		return serr(scInvalidParams, "put_from %q: %d bytes at %#x: not within a registered buffer (register_buffer)", key, n, uintptr(p))
	}
	ctx, cancel := s.call()
	r, err := s.mc().PutStart(ctx, &masterpb.PutStartRequest{ClientId: s.id, Key: key, Size: uint64(n), Config: rc, Upsert: upsert})
	cancel()
	if err != nil {
		return rpcErr("put "+strconv.Quote(key), err)
	}
	if r.Code == scAlreadyExists && !upsert {
		return nil
	}
	if r.Code != 0 {
		return codeErr("put "+strconv.Quote(key), r.Code, r.Message)
	}
	if err := s.writeReplicas(src, uint64(n), r.Replicas); err != nil {
		ctx, cancel := s.call()
		s.mc().PutRevoke(ctx, &masterpb.PutEndRequest{ClientId: s.id, Key: key, Token: r.Token})
		cancel()
		return err
	}
	ctx, cancel = s.call()
	defer cancel()
	e, err := s.mc().PutEnd(ctx, &masterpb.PutEndRequest{ClientId: s.id, Key: key, Token: r.Token})
	if err != nil {
		return rpcErr("put "+strconv.Quote(key), err)
	}
	if e.Code != 0 {
		return codeErr("put "+strconv.Quote(key), e.Code, e.Message)
	}
	return nil
}

// writeReplicas writes n bytes at src to every replica, at once.
func (s *mcStore) writeReplicas(src unsafe.Pointer, n uint64, rs []*masterpb.Replica) error {
	if len(rs) == 0 {
		return serr(scInvalidReplica, "the master placed no replica")
	}
	for _, r := range rs {
		if r.Size != n {
			return serr(scInvalidReplica, "a replica of %d bytes for %d", r.Size, n)
		}
	}
	if len(rs) == 1 {
		return s.moveReplica(xfer.OpWrite, src, rs[0], 0, n)
	}
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { errs[i] = s.moveReplica(xfer.OpWrite, src, r, 0, n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// managedBytes is the managed buffer at p.
func (m *mcEngine) managedBytes(p uintptr) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.regs {
		if r.managed && r.base == p {
			return r.r.Bytes()
		}
	}
	return nil
}

// registered reports whether [p, p+n) lies in a registered buffer.
func (s *mcStore) registered(p unsafe.Pointer, n int64) bool {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	_, ok := s.m.localRange(p, n)
	return ok
}

// lookup asks for keys' replica lists (and leases).
func (s *mcStore) lookup(keys []string) ([]*masterpb.ObjectReplicas, time.Time, error) {
	at := time.Now()
	ctx, cancel := s.call()
	defer cancel()
	r, err := s.mc().GetReplicaList(ctx, &masterpb.KeysRequest{ClientId: s.id, Keys: keys})
	if err != nil {
		return nil, at, rpcErr("get", err)
	}
	if len(r.Objects) != len(keys) {
		return nil, at, serr(scRPCFail, "get: the master answered %d objects for %d keys", len(r.Objects), len(keys))
	}
	return r.Objects, at, nil
}

// readObject reads bytes [off, off+n) of object o into p, from the first
// replica that answers, and checks the lease still held when they
// arrived.
func (s *mcStore) readObject(key string, o *masterpb.ObjectReplicas, at time.Time, p unsafe.Pointer, off, n uint64) error {
	var errs []error
	for _, r := range o.Replicas {
		err := s.moveReplica(xfer.OpRead, p, r, off, n)
		if err == nil {
			if o.LeaseMs > 0 && time.Since(at) > time.Duration(o.LeaseMs)*time.Millisecond {
				return serr(scLeaseExpired, "get %q: the bytes arrived after the read lease (%d ms) ended", key, o.LeaseMs)
			}
			return nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return serr(scNotReady, "get %q: no replica", key)
	}
	return errors.Join(errs...)
}

// found checks one object of a lookup.
func found(key string, o *masterpb.ObjectReplicas) error {
	if o.Code != 0 {
		return codeErr("get "+strconv.Quote(key), o.Code, "")
	}
	return nil
}

// get reads key's value into the local buffer and hands it out under a
// token, until release.
func (s *mcStore) get(key string) (p unsafe.Pointer, n int64, token int64, err error) {
	if err := checkKey(key); err != nil {
		return nil, 0, 0, err
	}
	for try := 1; ; try++ {
		os, at, err := s.lookup([]string{key})
		if err != nil {
			return nil, 0, 0, err
		}
		if err := found(key, os[0]); err != nil {
			return nil, 0, 0, err
		}
		size := os[0].Size
		if size == 0 {
			return nil, 0, 0, nil
		}
		b, err := s.stageAlloc(int64(size))
		if err != nil {
			return nil, 0, 0, err
		}
		p = unsafe.Pointer(unsafe.SliceData(b.Bytes()))
		if err := s.readObject(key, os[0], at, p, 0, size); err != nil {
			s.stage.Free(b)
			if again(err, try) {
				continue
			}
			return nil, 0, 0, err
		}
		token = newHandle()
		s.mu.Lock()
		s.gets[token] = b
		s.mu.Unlock()
		return p, int64(size), token, nil
	}
}

// leaseTries is how many times a read whose bytes arrived after its
// lease ended is made again, with a fresh lookup (a first connection to
// a segment's holder may take longer than a short lease).
const leaseTries = 3

// again reports whether a read that failed with err, on try try, is made
// again.
func again(err error, try int) bool {
	return storeCode(err) == scLeaseExpired && try < leaseTries
}

// release frees a get's staged bytes.
func (s *mcStore) release(token int64) error {
	s.mu.Lock()
	b, ok := s.gets[token]
	delete(s.gets, token)
	s.mu.Unlock()
	if !ok {
		return serr(scInvalidParams, "release %d: not a get's buffer (released already?)", token)
	}
	return s.stage.Free(b)
}

// getInto reads key's value into registered memory at p (cap bytes):
// its size, or an error when it does not fit.
func (s *mcStore) getInto(key string, p unsafe.Pointer, cap int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if p == nil || cap <= 0 || !s.registered(p, cap) {
		return 0, serr(scInvalidParams, "get_into %q: %d bytes at %#x: not within a registered buffer (register_buffer)", key, cap, uintptr(p))
	}
	for try := 1; ; try++ {
		os, at, err := s.lookup([]string{key})
		if err != nil {
			return 0, err
		}
		o := os[0]
		if err := found(key, o); err != nil {
			return 0, err
		}
		if o.Size > uint64(cap) {
			return 0, serr(scInvalidParams, "get_into %q: a value of %d bytes into %d", key, o.Size, cap)
		}
		if err := s.readObject(key, o, at, p, 0, o.Size); err != nil {
			if again(err, try) {
				continue
			}
			return 0, err
		}
		return int64(o.Size), nil
	}
}

// readRange is one range of get_into_ranges: n bytes from off in the
// value into registered memory at dst.
type readRange struct {
	dst unsafe.Pointer
	off uint64
	n   uint64
}

// getRanges reads ranges of key's value; codes gets each range's byte
// count or error code. The key's lookup failing fails every range.
func (s *mcStore) getRanges(key string, rs []readRange, codes []int64) {
	fill := func(err error) {
		for i := range codes {
			codes[i] = int64(storeCode(err))
		}
	}
	if err := checkKey(key); err != nil {
		fill(err)
		return
	}
	os, at, err := s.lookup([]string{key})
	if err == nil {
		err = found(key, os[0])
	}
	if err != nil {
		fill(err)
		return
	}
	o := os[0]
	for i, r := range rs {
		switch {
		case r.off+r.n > o.Size || r.off+r.n < r.off:
			codes[i] = int64(scInvalidParams)
		case r.n == 0:
			codes[i] = 0
		case r.dst == nil || !s.registered(r.dst, int64(r.n)):
			codes[i] = int64(scInvalidParams)
		default:
			err := s.readObject(key, o, at, r.dst, r.off, r.n)
			for try := 1; again(err, try); try++ {
				var os []*masterpb.ObjectReplicas
				if os, at, err = s.lookup([]string{key}); err == nil {
					if err = found(key, os[0]); err == nil && os[0].Size == o.Size {
						o = os[0]
						err = s.readObject(key, o, at, r.dst, r.off, r.n)
					} else if err == nil {
						err = serr(scInvalidParams, "get_into_ranges %q: the value changed size", key)
					}
				}
			}
			if err != nil {
				codes[i] = int64(storeCode(err))
			} else {
				codes[i] = int64(r.n)
			}
		}
	}
}

// size is key's value's size.
func (s *mcStore) size(key string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	os, _, err := s.lookup([]string{key})
	if err != nil {
		return 0, err
	}
	if err := found(key, os[0]); err != nil {
		return 0, err
	}
	return int64(os[0].Size), nil
}

// exist says for each key 1 (exists), 0 (does not) or an error code.
func (s *mcStore) exist(keys []string, codes []int64) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	ctx, cancel := s.call()
	defer cancel()
	r, err := s.mc().Exist(ctx, &masterpb.KeysRequest{ClientId: s.id, Keys: keys})
	if err != nil {
		return rpcErr("is_exist", err)
	}
	if len(r.Codes) != len(keys) {
		return serr(scRPCFail, "is_exist: the master answered %d codes for %d keys", len(r.Codes), len(keys))
	}
	for i, c := range r.Codes {
		codes[i] = int64(c)
	}
	return nil
}

// remove removes keys; codes gets each one's code.
func (s *mcStore) remove(keys []string, force bool, codes []int64) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	ctx, cancel := s.call()
	defer cancel()
	r, err := s.mc().Remove(ctx, &masterpb.RemoveRequest{ClientId: s.id, Keys: keys, Force: force})
	if err != nil {
		return rpcErr("remove", err)
	}
	if len(r.Codes) != len(keys) {
		return serr(scRPCFail, "remove: the master answered %d codes for %d keys", len(r.Codes), len(keys))
	}
	for i, c := range r.Codes {
		codes[i] = int64(c)
	}
	return nil
}

// removeMatching removes the keys matching pattern (every key when all):
// their count.
func (s *mcStore) removeMatching(pattern string, all, force bool) (int64, error) {
	ctx, cancel := s.call()
	defer cancel()
	var r *masterpb.CountResponse
	var err error
	if all {
		r, err = s.mc().RemoveAll(ctx, &masterpb.RemoveAllRequest{ClientId: s.id, Force: force})
	} else {
		r, err = s.mc().RemoveByRegex(ctx, &masterpb.RemoveByRegexRequest{ClientId: s.id, Pattern: pattern, Force: force})
	}
	if err != nil {
		return 0, rpcErr("remove", err)
	}
	if r.Count < 0 {
		return 0, codeErr("remove", int32(r.Count), r.Message)
	}
	return r.Count, nil
}
