package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/mooncake"
)

// Mooncake's TransferEngine over an xfer Engine: the engine half of
// python/xfer/mooncake/engine.py. A Mooncake engine registers ranges of
// its caller's memory, lists them in its segment table (mcsegment.go),
// and reaches peers by segment name, addressing their memory by raw
// virtual address. A segment name is "host:rpc_port" under P2PHANDSHAKE;
// with a metadata server (an HTTP one, or etcd) it is any name, the
// engine's local_hostname, which the server maps to where the engine
// listens (package mooncake's rpc_meta entries).
// Its calls return Mooncake's codes (mcCode), not the connector's.

// mcCode is a Mooncake engine call's result: 0, or one of the negative
// codes of Mooncake's transfer engine (its error.h). Their values are part
// of the ABI.
type mcCode int32

const (
	mcOK                = mcCode(0)
	mcErrInvalid        = mcCode(-1)   // bad input, and a failed or timed-out transfer (as Mooncake's binding reports them)
	mcErrNotRegistered  = mcCode(-3)   // an address outside every registered range
	mcErrNoDevice       = mcCode(-6)   // GPU memory where there is no CUDA driver or GPU
	mcErrOverlapped     = mcCode(-7)   // a range overlapping a registered one
	mcErrDNS            = mcCode(-101) // a segment's host that does not resolve
	mcErrSocket         = mcCode(-102) // a peer that cannot be reached, or was lost
	mcErrMetadata       = mcCode(-200) // a peer with no segment table, or a malformed one
	mcErrMemory         = mcCode(-302) // memory could not be mapped or registered
	mcErrNotImplemented = mcCode(-303) // what this engine does not do yet
)

// The errors that carry a Mooncake code of their own.
var (
	errNotRegistered  = errors.New("address not registered")
	errOverlapped     = errors.New("address range overlaps a registered one")
	errMetadata       = errors.New("bad segment metadata")
	errMemory         = errors.New("memory")
	errNotImplemented = errors.New("not implemented")
)

// mcCodeOf classifies err as Mooncake would report it.
func mcCodeOf(err error) mcCode {
	var dns *net.DNSError
	switch {
	case err == nil:
		return mcOK
	case errors.Is(err, errNotRegistered), errors.Is(err, xfer.ErrRemoteAccess):
		return mcErrNotRegistered
	case errors.Is(err, errOverlapped):
		return mcErrOverlapped
	case errors.Is(err, xfer.ErrCUDANotAvailable):
		return mcErrNoDevice
	case errors.As(err, &dns):
		return mcErrDNS
	case errors.Is(err, errMetadata):
		return mcErrMetadata
	case errors.Is(err, errMemory):
		return mcErrMemory
	case errors.Is(err, errNotImplemented):
		return mcErrNotImplemented
	case errors.Is(err, errInvalid), errors.Is(err, context.DeadlineExceeded):
		return mcErrInvalid
	case errors.Is(err, xfer.ErrPeerLost), errors.Is(err, net.ErrClosed):
		return mcErrSocket
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return mcErrSocket
	}
	return mcErrInvalid
}

// mcTimeout is how long a transfer may take before it fails: Mooncake's
// MC_TRANSFER_TIMEOUT (seconds, at least 5; default 30), plus a
// nanosecond a byte (a GiB a second), as Mooncake's binding allows.
func mcTimeout(bytes uint64) time.Duration {
	base := 30 * time.Second
	if s, err := strconv.Atoi(getenv("MC_TRANSFER_TIMEOUT")); err == nil {
		base = time.Duration(max(s, 5)) * time.Second
	}
	return base + time.Duration(min(bytes, 1<<50))
}

// mcEngine is an open Mooncake engine.
type mcEngine struct {
	e       *xfer.Engine
	segment string // this engine's segment name: host:port, or local_hostname with a metadata server
	port    int
	meta    mooncake.Store  // the metadata server; nil under P2PHANDSHAKE
	ctx     context.Context // ends at close
	cancel  context.CancelFunc
	calls   sync.WaitGroup
	bg      sync.WaitGroup // serve, which takes peers' notifications
	inbox   mcInbox        // notifications received, for get_notifies

	mu      sync.Mutex
	closed  bool
	table   *xfer.Region // the segment table, exported as segExport
	gen     uint32
	regs    []mcRange // in the order of registration
	peers   map[string]*mcPeer
	batches map[int64]*mcBatch
}

// mcRange is a registered range of local memory.
type mcRange struct {
	base, n uintptr
	r       *xfer.Region
	managed bool // mapped by allocate_managed_buffer: unmapped when freed
	device  bool // GPU memory: the CPU never touches it
}

// mcPeer is a dialed segment and the ranges its table listed last.
type mcPeer struct {
	mu    sync.Mutex // serializes table reads
	p     *xfer.Peer
	table xfer.RegionDesc
	descs []xfer.RegionDesc
}

// mcBatch is a submitted batch: ops until done, then each op's error.
type mcBatch struct {
	b        *xfer.Batch
	ops      []xfer.Op
	seg      string
	deadline time.Time
}

var (
	mcMu      sync.Mutex
	mcEngines = map[int64]*mcEngine{}
)

// parseProtocol maps Mooncake's protocol names to xfer's transports, and
// xfer's own shm (processes of one host).
func parseProtocol(p string) (xfer.Policy, error) {
	switch strings.ToLower(p) {
	case "", "tcp":
		return xfer.PolicyTCP, nil
	case "rdma":
		return xfer.PolicyRDMA, nil
	case "shm":
		return xfer.PolicySHM, nil
	}
	return "", fmt.Errorf("mooncake: protocol %q: xfer's TransferEngine moves tcp, rdma and (between processes of one host) shm: %w", p, errInvalid)
}

// checkMetadata parses a metadata_server: P2PHANDSHAKE (nil, nil), or a
// server package mooncake reaches (http://, etcd://, a bare host:port for
// etcd).
func checkMetadata(s string) (*mooncake.ServerAddr, error) {
	if s == mooncake.P2PHandshake {
		return nil, nil
	}
	a, err := mooncake.ParseServer(s)
	if errors.Is(err, mooncake.ErrUnsupported) {
		return nil, fmt.Errorf("mooncake: %w: %w", err, errNotImplemented)
	}
	if err != nil {
		return nil, fmt.Errorf("mooncake: %w (or P2PHANDSHAKE): %w", err, errInvalid)
	}
	return &a, nil
}

// listenHost is the address an engine with a metadata server listens on
// and publishes, as Mooncake chooses it: MC_TCP_BIND_ADDRESS when set;
// else local_hostname's host when it is an address or a name that
// resolves; else the host's first non-loopback IPv4 address.
func listenHost(host string) (string, error) {
	if a := strings.TrimSpace(getenv("MC_TCP_BIND_ADDRESS")); a != "" {
		return a, nil
	}
	if net.ParseIP(host) != nil {
		return host, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if addrs, err := net.DefaultResolver.LookupHost(ctx, host); err == nil && len(addrs) > 0 {
		return host, nil
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("mooncake: local hostname %q does not resolve, and the host's addresses cannot be listed: %w", host, err)
	}
	for _, a := range ifs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("mooncake: local hostname %q does not resolve and the host has no non-loopback IPv4 address: "+
		"set MC_TCP_BIND_ADDRESS to the address to listen on: %w", host, errInvalid)
}

// secretConfig takes the xfer CLI's shared secret from XFER_SECRET or
// XFER_SECRET_FILE: with one, the engine's peers must prove the same
// secret in the handshake, and it proves it to them.
func secretConfig(cfg *xfer.Config) {
	cfg.Secret = getenv("XFER_SECRET")
	cfg.SecretFile = getenv("XFER_SECRET_FILE")
}

// mcOpen opens an engine. Under P2PHANDSHAKE it listens on localHost
// ("host" for a port of the kernel's choice, or "host:port") and its
// segment is named host:port. With a metadata server its segment is named
// localHost itself; it listens on a port of the kernel's choice (the given
// one with MC_LEGACY_RPC_PORT_BINDING), as Mooncake's engine does, and
// publishes where in the server's rpc_meta entry for its name.
func mcOpen(localHost, metadata, protocol, device string) (int64, error) {
	srv, err := checkMetadata(metadata)
	if err != nil {
		return 0, err
	}
	pol, err := parseProtocol(protocol)
	if err != nil {
		return 0, err
	}
	host, port := localHost, "0"
	if h, p, err := net.SplitHostPort(localHost); err == nil {
		host, port = h, p
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return 0, fmt.Errorf("mooncake: local hostname %q: want a host name or address, optionally with :port: %w", localHost, errInvalid)
	}
	if srv != nil {
		if host, err = listenHost(host); err != nil {
			return 0, err
		}
		if getenv("MC_LEGACY_RPC_PORT_BINDING") == "" {
			port = "0"
		}
	}
	cfg := xfer.Config{Listen: net.JoinHostPort(host, port), Transport: pol, MemoryMB: 4}
	secretConfig(&cfg)
	if device != "" && pol == xfer.PolicyRDMA {
		if devs := strings.Split(device, ","); len(devs) == 1 {
			cfg.RDMA.Device = device
		} else {
			cfg.RDMA.Devices = devs
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := xfer.Open(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("mooncake: open an engine on %s (%s): %w", cfg.Listen, pol, err)
	}
	_, ps, _ := net.SplitHostPort(e.Addr())
	n, _ := strconv.Atoi(ps)
	m := &mcEngine{e: e, segment: net.JoinHostPort(host, ps), port: n, peers: map[string]*mcPeer{}, batches: map[int64]*mcBatch{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if m.table, err = e.NewRegion(segTableLen, xfer.AccessRead); err != nil {
		e.Close()
		return 0, fmt.Errorf("mooncake: the segment table: %w: %w", err, errMemory)
	}
	m.writeTable()
	e.Export(segExport, m.table)
	if srv != nil {
		m.segment = localHost
		if err := m.publish(ctx, metadata, host, n); err != nil {
			m.cancel()
			e.Close()
			return 0, err
		}
	}
	m.bg.Add(1)
	go m.serve()
	h := newHandle()
	mcMu.Lock()
	mcEngines[h] = m
	mcMu.Unlock()
	return h, nil
}

// useMC is the open engine h, counted as in use until done is called.
func useMC(h int64) (*mcEngine, func(), error) {
	mcMu.Lock()
	defer mcMu.Unlock()
	m, ok := mcEngines[h]
	if !ok {
		return nil, nil, fmt.Errorf("mooncake: engine handle %d: closed (or never opened): %w", h, errInvalid)
	}
	m.calls.Add(1)
	return m, m.calls.Done, nil
}

// mcClose closes an engine: calls in flight end, its registrations are
// dropped (managed buffers unmapped), its peers closed. Idempotent.
func mcClose(h int64) error {
	mcMu.Lock()
	m, ok := mcEngines[h]
	delete(mcEngines, h)
	mcMu.Unlock()
	if !ok {
		return nil
	}
	m.cancel()
	m.calls.Wait()
	m.bg.Wait()
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	var err error
	if m.meta != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.meta.Delete(ctx, mooncake.RPCMetaKey(m.segment))
		cancel()
		err = errors.Join(err, m.meta.Close())
	}
	return errors.Join(m.e.Close(), err)
}

// publish connects to the metadata server and publishes this engine's
// segment there: listening on host:port.
func (m *mcEngine) publish(ctx context.Context, metadata, host string, port int) error {
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("mooncake: listening on %s: peers cannot reach an unspecified address: "+
			"name one of this host's (MC_TCP_BIND_ADDRESS): %w", host, errInvalid)
	}
	st, err := mooncake.OpenStore(ctx, metadata, mooncake.StoreOptions{Token: getenv("MC_METADATA_HTTP_TOKEN")})
	if err != nil {
		return fmt.Errorf("mooncake: %w: %w", err, errMetadata)
	}
	if err := mooncake.PublishRPCMeta(ctx, st, m.segment, mooncake.RPCMeta{Host: host, Port: port}); err != nil {
		st.Close()
		return fmt.Errorf("mooncake: %w: %w", err, errMetadata)
	}
	m.meta = st
	return nil
}

// addrOf is where segment seg listens: its name under P2PHANDSHAKE, its
// rpc_meta entry with a metadata server.
func (m *mcEngine) addrOf(ctx context.Context, seg string) (string, error) {
	if m.meta == nil {
		if _, _, err := net.SplitHostPort(seg); err != nil {
			return "", fmt.Errorf("mooncake: segment %q: want host:rpc_port (P2PHANDSHAKE's segment names): %w", seg, errInvalid)
		}
		return seg, nil
	}
	rm, err := mooncake.ResolveRPCMeta(ctx, m.meta, seg)
	if err != nil {
		return "", fmt.Errorf("mooncake: %w: %w", err, errMetadata)
	}
	return rm.Addr(), nil
}

// writeTable rewrites the segment table from regs; m.mu is held (or m
// is not yet shared).
func (m *mcEngine) writeTable() {
	descs := make([]xfer.RegionDesc, len(m.regs))
	for i, r := range m.regs {
		descs[i] = r.r.Desc()
	}
	m.gen++
	encodeSegment(m.table.Bytes(), descs, m.gen)
}

// memAt views n bytes at p, memory the caller owns.
func memAt(p unsafe.Pointer, n int64) []byte { return unsafe.Slice((*byte)(p), int(n)) }

// checkRanges refuses ranges that are empty, wrap, overlap each other or
// a registered range.
func (m *mcEngine) checkRanges(addrs []unsafe.Pointer, lens []int64) error {
	type span struct{ lo, hi uintptr }
	spans := make([]span, 0, len(addrs)+len(m.regs))
	for _, r := range m.regs {
		spans = append(spans, span{r.base, r.base + r.n})
	}
	for i, p := range addrs {
		a, n := uintptr(p), lens[i]
		if p == nil || n <= 0 || a+uintptr(n) < a {
			return fmt.Errorf("mooncake: register [%#x, +%d): want a non-null address and a positive length: %w", a, n, errInvalid)
		}
		s := span{a, a + uintptr(n)}
		for _, o := range spans {
			if s.lo < o.hi && o.lo < s.hi {
				return fmt.Errorf("mooncake: register [%#x, +%d): overlaps [%#x, %#x): %w", a, n, o.lo, o.hi, errOverlapped)
			}
		}
		spans = append(spans, s)
	}
	if len(m.regs)+len(addrs) > segMaxEntries {
		return fmt.Errorf("mooncake: register %d ranges: %d are registered, at most %d: %w", len(addrs), len(m.regs), segMaxEntries, errMemory)
	}
	return nil
}

// register registers the caller's ranges (all or none) and lists them in
// the segment table: host memory, or with device GPU memory (CUDA device
// addresses, which the driver places on their GPU). Registering memory
// the caller frees before unregistering it is the caller's error, as in
// Mooncake.
func (m *mcEngine) register(addrs []unsafe.Pointer, lens []int64, device bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkRanges(addrs, lens); err != nil {
		return err
	}
	added := make([]mcRange, 0, len(addrs))
	for i, p := range addrs {
		var r *xfer.Region
		var err error
		if device {
			r, err = m.e.RegisterDevice(uintptr(p), int(lens[i]), xfer.AccessReadWrite)
		} else {
			r, err = m.e.Register(memAt(p, lens[i]), xfer.AccessReadWrite)
		}
		if err != nil {
			for _, a := range added {
				a.r.Close()
			}
			kind := errMemory
			if errors.Is(err, mem.ErrNotDevice) {
				kind = errInvalid
			}
			return fmt.Errorf("mooncake: register [%#x, +%d): %w: %w", uintptr(p), lens[i], err, kind)
		}
		added = append(added, mcRange{base: uintptr(p), n: uintptr(lens[i]), r: r, device: device})
	}
	m.addRanges(added...)
	return nil
}

// addRanges records ranges and rewrites the table; m.mu is held. The
// table keeps the order of registration: its first range is what
// get_first_buffer_address reports, as Mooncake's segment lists its
// buffers.
func (m *mcEngine) addRanges(rs ...mcRange) {
	m.regs = append(m.regs, rs...)
	m.writeTable()
}

// unregister drops the ranges registered at addrs (all or none): peers
// can no longer reach them, and accesses in progress finish first.
// Managed buffers are freed with free_managed_buffer instead.
func (m *mcEngine) unregister(addrs []unsafe.Pointer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	idx := make([]int, 0, len(addrs))
	for _, p := range addrs {
		i := slices.IndexFunc(m.regs, func(r mcRange) bool { return r.base == uintptr(p) })
		if i < 0 {
			return fmt.Errorf("mooncake: unregister %#x: no range registered there: %w", uintptr(p), errNotRegistered)
		}
		if m.regs[i].managed {
			return fmt.Errorf("mooncake: unregister %#x: a managed buffer (free_managed_buffer frees it): %w", uintptr(p), errInvalid)
		}
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	return m.dropRanges(idx)
}

// dropRanges closes and forgets m.regs[idx...]; m.mu is held.
func (m *mcEngine) dropRanges(idx []int) error {
	var err error
	for _, i := range idx {
		err = errors.Join(err, m.regs[i].r.Close())
	}
	keep := m.regs[:0]
	for i, r := range m.regs {
		if !slices.Contains(idx, i) {
			keep = append(keep, r)
		}
	}
	clear(m.regs[len(keep):])
	m.regs = keep
	m.writeTable()
	return err
}

// allocManaged maps and registers n bytes (allocate_managed_buffer).
func (m *mcEngine) allocManaged(n int64) (uintptr, error) {
	if n <= 0 || n > 1<<40 {
		return 0, fmt.Errorf("mooncake: allocate a managed buffer of %d bytes: %w", n, errInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.regs) >= segMaxEntries {
		return 0, fmt.Errorf("mooncake: allocate: %d ranges are registered, at most %d: %w", len(m.regs), segMaxEntries, errMemory)
	}
	r, err := m.e.NewRegion(int(n), xfer.AccessReadWrite)
	if err != nil {
		return 0, fmt.Errorf("mooncake: allocate a managed buffer of %d bytes: %w: %w", n, err, errMemory)
	}
	b := r.Bytes()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	m.addRanges(mcRange{base: base, n: uintptr(len(b)), r: r, managed: true})
	return base, nil
}

// freeManaged unregisters and unmaps a managed buffer.
func (m *mcEngine) freeManaged(p unsafe.Pointer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.regs, func(r mcRange) bool { return r.base == uintptr(p) && r.managed })
	if i < 0 {
		return fmt.Errorf("mooncake: free_managed_buffer %#x: not a managed buffer of this engine: %w", uintptr(p), errNotRegistered)
	}
	return m.dropRanges([]int{i})
}

// localRange returns the registered range [p, p+n) lies in, if any; m.mu
// is held.
func (m *mcEngine) localRange(p unsafe.Pointer, n int64) (mcRange, bool) {
	a := uintptr(p)
	if p == nil || n < 0 || a+uintptr(n) < a {
		return mcRange{}, false
	}
	for _, r := range m.regs {
		if a >= r.base && a+uintptr(n) <= r.base+r.n {
			return r, true
		}
	}
	return mcRange{}, false
}

// localCopy copies n bytes between buf (the caller's) and registered
// memory at p: into it when in is true (write_bytes_to_buffer), out of it
// otherwise (read_bytes_from_buffer). An address outside every registered
// range is refused, and nothing is touched.
func (m *mcEngine) localCopy(p, buf unsafe.Pointer, n int64, in bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.localRange(p, n)
	if !ok || (n > 0 && buf == nil) {
		return fmt.Errorf("mooncake: %d bytes at %#x: not within a registered buffer: %w", n, uintptr(p), errNotRegistered)
	}
	if n == 0 {
		return nil
	}
	if r.device {
		dst, src := memAt(p, n), memAt(buf, n)
		if !in {
			dst, src = src, dst
		}
		if err := m.e.Copy(dst, src); err != nil {
			return fmt.Errorf("mooncake: %d bytes at %#x on the GPU: %w", n, uintptr(p), err)
		}
		return nil
	}
	if in {
		copy(memAt(p, n), memAt(buf, n))
	} else {
		copy(memAt(buf, n), memAt(p, n))
	}
	return nil
}

// peer returns the dialed segment seg, dialing it (and reading its table)
// first if need be.
func (m *mcEngine) peer(ctx context.Context, seg string) (*mcPeer, error) {
	m.mu.Lock()
	mp := m.peers[seg]
	m.mu.Unlock()
	if mp != nil {
		return mp, nil
	}
	addr, err := m.addrOf(ctx, seg)
	if err != nil {
		return nil, err
	}
	p, err := m.e.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("mooncake: segment %s: %w", seg, err)
	}
	d, ok := p.Region(segExport)
	if !ok {
		p.Close()
		return nil, fmt.Errorf("mooncake: segment %s: an xfer engine, but not a Mooncake one (no segment table): %w", seg, errMetadata)
	}
	mp = &mcPeer{p: p, table: d}
	if err := m.refresh(ctx, mp); err != nil {
		p.Close()
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.peers[seg]; old != nil {
		return old, nil // dialed meanwhile: Dial shares the peer
	}
	m.peers[seg] = mp
	return mp, nil
}

// forget drops a segment whose connection failed, so that the next call
// dials it afresh.
func (m *mcEngine) forget(seg string, mp *mcPeer) {
	m.mu.Lock()
	if m.peers[seg] == mp {
		delete(m.peers, seg)
	}
	m.mu.Unlock()
}

// refresh reads mp's segment table again.
func (m *mcEngine) refresh(ctx context.Context, mp *mcPeer) error {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	buf, err := m.e.AllocWait(ctx, segTableLen)
	if err != nil {
		return fmt.Errorf("mooncake: a buffer for a segment table: %w", err)
	}
	defer m.e.Free(buf)
	b := buf.Bytes()
	const first = 4096 // the header and the first entries, in one READ
	for try := 0; ; try++ {
		if err := mp.p.Read(ctx, b[:first], mp.table.At(0)); err != nil {
			return fmt.Errorf("mooncake: read the segment table of %s: %w", mp.p, err)
		}
		n, err := segmentCount(b)
		if err != nil {
			return fmt.Errorf("mooncake: %s: %w: %w", mp.p, err, errMetadata)
		}
		if end := segHeaderLen + n*xfer.RegionDescLen; end > first {
			if err := mp.p.Read(ctx, b[:end], mp.table.At(0)); err != nil {
				return fmt.Errorf("mooncake: read the segment table of %s: %w", mp.p, err)
			}
		}
		descs, err := decodeSegment(b)
		if errors.Is(err, errTorn) && try < 16 {
			time.Sleep(time.Duration(try+1) * 100 * time.Microsecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("mooncake: %s: %w: %w", mp.p, err, errMetadata)
		}
		mp.descs = descs
		return nil
	}
}

// resolve maps [addr, addr+n) in mp's address space to a remote address,
// reading its table again once when no listed range holds it.
func (m *mcEngine) resolve(ctx context.Context, mp *mcPeer, addr, n uint64) (xfer.RemoteAddr, error) {
	for again := false; ; again = true {
		mp.mu.Lock()
		d, ok := findRange(mp.descs, addr, n)
		mp.mu.Unlock()
		if ok {
			return xfer.RemoteAddr{Region: d.ID, Addr: addr, Key: d.Key}, nil
		}
		if again {
			return xfer.RemoteAddr{}, fmt.Errorf("mooncake: %d bytes at %#x on segment %s: not within a registered buffer there: %w", n, addr, mp.p, errNotRegistered)
		}
		if err := m.refresh(ctx, mp); err != nil {
			return xfer.RemoteAddr{}, err
		}
	}
}

// firstBuffer is the address of the first range seg lists (0 for none).
func (m *mcEngine) firstBuffer(seg string) (uint64, error) {
	if seg == m.segment {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.regs) == 0 {
			return 0, nil
		}
		return uint64(m.regs[0].base), nil
	}
	ctx, cancel := m.opCtx(0)
	defer cancel()
	mp, err := m.peer(ctx, seg)
	if err != nil {
		return 0, err
	}
	if err := m.refresh(ctx, mp); err != nil {
		m.forget(seg, mp)
		return 0, err
	}
	mp.mu.Lock()
	defer mp.mu.Unlock()
	if len(mp.descs) == 0 {
		return 0, nil
	}
	return mp.descs[0].Addr, nil
}

// opCtx bounds a transfer of n bytes by mcTimeout, ending with the engine.
func (m *mcEngine) opCtx(n uint64) (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, mcTimeout(n))
}

// mcXfer is one transfer of a batch: n bytes between local memory at
// local and the segment's memory at remote.
type mcXfer struct {
	local  unsafe.Pointer
	remote uint64
	n      int64
}

// prepare checks a batch and builds its operations: every local range
// registered here, every remote one registered on seg; nothing is posted
// when one is not.
func (m *mcEngine) prepare(ctx context.Context, seg string, kind xfer.OpKind, xs []mcXfer) (*mcPeer, []xfer.Op, error) {
	if kind != xfer.OpWrite && kind != xfer.OpRead {
		return nil, nil, fmt.Errorf("mooncake: opcode %d: want Read (0) or Write (1): %w", kind, errInvalid)
	}
	if len(xs) == 0 {
		return nil, nil, fmt.Errorf("mooncake: an empty batch: %w", errInvalid)
	}
	m.mu.Lock()
	for i, x := range xs {
		if x.n <= 0 {
			m.mu.Unlock()
			return nil, nil, fmt.Errorf("mooncake: transfer %d: length %d: %w", i, x.n, errInvalid)
		}
		if _, ok := m.localRange(x.local, x.n); !ok {
			m.mu.Unlock()
			return nil, nil, fmt.Errorf("mooncake: transfer %d: %d local bytes at %#x: not within a registered buffer: %w", i, x.n, uintptr(x.local), errNotRegistered)
		}
	}
	m.mu.Unlock()
	mp, err := m.peer(ctx, seg)
	if err != nil {
		return nil, nil, err
	}
	ops := make([]xfer.Op, len(xs))
	for i, x := range xs {
		ra, err := m.resolve(ctx, mp, x.remote, uint64(x.n))
		if err != nil {
			if !errors.Is(err, errNotRegistered) {
				m.forget(seg, mp)
			}
			return nil, nil, err
		}
		ops[i] = xfer.Op{Kind: kind, Local: memAt(x.local, x.n), Remote: ra}
	}
	return mp, ops, nil
}

// total is the batch's byte count.
func total(xs []mcXfer) uint64 {
	var t uint64
	for _, x := range xs {
		t += uint64(x.n)
	}
	return t
}

// submit posts a batch and returns its id, or an error and posts nothing.
func (m *mcEngine) submit(seg string, kind xfer.OpKind, xs []mcXfer) (int64, error) {
	ctx, cancel := m.opCtx(total(xs))
	defer cancel()
	mp, ops, err := m.prepare(ctx, seg, kind, xs)
	if err != nil {
		return 0, err
	}
	b := &mcBatch{ops: ops, seg: seg, deadline: time.Now().Add(mcTimeout(total(xs)))}
	b.b = mp.p.Submit(ops)
	id := newHandle()
	m.mu.Lock()
	m.batches[id] = b
	m.mu.Unlock()
	return id, nil
}

// batch is the submitted batch id.
func (m *mcEngine) batch(id int64) (*mcBatch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.batches[id]
	if !ok {
		return nil, fmt.Errorf("mooncake: batch %d: unknown, or freed once it completed: %w", id, errInvalid)
	}
	return b, nil
}

// freeBatch forgets batch id.
func (m *mcEngine) freeBatch(id int64) {
	m.mu.Lock()
	delete(m.batches, id)
	m.mu.Unlock()
}

// Batch states, as transfer_check_status reports them.
const (
	mcPending   = 0
	mcCompleted = 1
	mcFailed    = -1
	mcTimedOut  = -2
)

// result is a done batch's first error, with each op's code in codes
// (as many as it holds).
func (b *mcBatch) result(codes []int32) error {
	var first error
	for i := range b.ops {
		err := b.ops[i].Err
		if i < len(codes) {
			codes[i] = int32(mcCodeOf(err))
		}
		if err != nil && first == nil {
			first = fmt.Errorf("mooncake: transfer %d of the batch to %s: %w", i, b.seg, err)
		}
	}
	return first
}

// wait waits for batch id until it is done or its deadline passes, and
// frees it either way: nil when every op succeeded, the first error
// otherwise (each op's code in codes).
func (m *mcEngine) wait(id int64, codes []int32) error {
	b, err := m.batch(id)
	if err != nil {
		return err
	}
	defer m.freeBatch(id)
	ctx, cancel := context.WithDeadline(m.ctx, b.deadline)
	defer cancel()
	return m.waitBatch(ctx, b, codes)
}

// waitBatch waits for b until it is done or ctx ends: nil when every op
// succeeded, the first error otherwise (each op's code in codes).
func (m *mcEngine) waitBatch(ctx context.Context, b *mcBatch, codes []int32) error {
	spinDone(b.b, mcSpin)
	if err := b.b.Wait(ctx); err != nil && !b.b.Done() {
		for i := range codes {
			codes[i] = int32(mcErrInvalid) // abandoned: the ops still belong to the batch
		}
		return fmt.Errorf("mooncake: a batch of %d to %s: not done in time (MC_TRANSFER_TIMEOUT): %w", len(b.ops), b.seg, err)
	}
	if err := b.result(codes); err != nil {
		if errors.Is(err, xfer.ErrPeerLost) {
			m.dropSegment(b.seg)
		}
		return err
	}
	return nil
}

// mcSpin is how long a sync transfer polls for its batch's end before
// its thread sleeps: a call through the C ABI runs on a thread of its
// own, which a wake-up costs tens of µs (connector.ThreadWaitSpin). The
// spin needs a second P for the transfer's own work: none under
// GOMAXPROCS 1.
const mcSpin = 50 * time.Microsecond

// spinDone polls b for up to d, or not at all under GOMAXPROCS 1.
func spinDone(b *xfer.Batch, d time.Duration) {
	if d <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return
	}
	start := time.Now()
	for i := 1; !b.Done(); i++ {
		if i%32 == 0 && time.Since(start) >= d {
			return
		}
	}
}

// dropSegment forgets the dialed segment seg after its connection failed.
func (m *mcEngine) dropSegment(seg string) {
	m.mu.Lock()
	delete(m.peers, seg)
	m.mu.Unlock()
}

// check reports batch id's state without waiting; a completed or failed
// batch is freed, as transfer_check_status frees it.
func (m *mcEngine) check(id int64) (int32, error) {
	b, err := m.batch(id)
	if err != nil {
		return mcFailed, err
	}
	if !b.b.Done() {
		if time.Now().After(b.deadline) {
			return mcTimedOut, nil
		}
		return mcPending, nil
	}
	m.freeBatch(id)
	if err := b.result(nil); err != nil {
		return mcFailed, err
	}
	return mcCompleted, nil
}

// transferSync posts a batch and waits for it: a sync transfer. A batch
// refused at the target because a range it listed was unregistered is
// resolved against its table again and posted once more. With a notify,
// the target is sent it once the batch is done (mcnotify.go), and a notify
// that cannot be sent fails the call.
func (m *mcEngine) transferSync(seg string, kind xfer.OpKind, xs []mcXfer, codes []int32, notify *mcNotify) error {
	if err := m.checkNotify(notify); err != nil {
		return err
	}
	ctx, cancel := m.opCtx(total(xs))
	defer cancel()
	for again := false; ; again = true {
		mp, ops, err := m.prepare(ctx, seg, kind, xs)
		if err != nil {
			return err
		}
		err = m.waitBatch(ctx, &mcBatch{b: mp.p.Submit(ops), ops: ops, seg: seg}, codes)
		if err == nil && notify != nil {
			return m.notifyAfter(seg, total(xs), *notify)
		}
		if again || !errors.Is(err, xfer.ErrRemoteAccess) {
			return err
		}
		if rerr := m.refresh(ctx, mp); rerr != nil {
			return err
		}
	}
}

// notifyAfter sends notify to seg after a transfer of n bytes to it
// completed, within the transfer's timeout.
func (m *mcEngine) notifyAfter(seg string, n uint64, notify mcNotify) error {
	ctx, cancel := m.opCtx(n)
	defer cancel()
	mp, err := m.peer(ctx, seg)
	if err != nil {
		return err
	}
	if err := m.sendNotify(ctx, mp, notify); err != nil {
		if !errors.Is(err, errInvalid) {
			m.forget(seg, mp)
		}
		return err
	}
	return nil
}
