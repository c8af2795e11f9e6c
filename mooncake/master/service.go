package master

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// Defaults of Options, as mooncake_master's flags have them.
const (
	DefaultLeaseTTL              = 10 * time.Second // --default_kv_lease_ttl
	DefaultSoftPinTTL            = 30 * time.Minute // --default_kv_soft_pin_ttl
	DefaultMaxSoftPinTTL         = 24 * time.Hour   // --max_kv_soft_pin_ttl
	DefaultEvictionRatio         = 0.05             // --eviction_ratio
	DefaultEvictionHighWatermark = 0.90             // --eviction_high_watermark_ratio
	DefaultClientTTL             = 10 * time.Second // --client_ttl
	DefaultPutStartDiscard       = 30 * time.Second // --put_start_discard_timeout_sec
	DefaultPutStartRelease       = 10 * time.Minute // --put_start_release_timeout_sec
)

// Options configures a Service. The zero value is mooncake_master's
// defaults.
type Options struct {
	// DataPort is the port of the master's data plane (package
	// mooncake/masterdata), which Ping tells clients; 0: none.
	DataPort int
	// LeaseTTL is how long a read lease lasts (GetReplicaList, Exist):
	// while it does, the object is neither removed (but by force) nor
	// evicted, and an upsert keeps its old places. Default:
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// SoftPinTTL is how long a soft pin lasts when a put asks for one
	// without a TTL. Default: DefaultSoftPinTTL.
	SoftPinTTL time.Duration
	// MaxSoftPinTTL is the longest soft pin a put may ask for; a longer
	// one is CodeInvalidParams. Default: DefaultMaxSoftPinTTL.
	MaxSoftPinTTL time.Duration
	// NoEvictSoftPinned keeps soft-pinned objects from eviction
	// (mooncake_master's --allow_evict_soft_pinned_objects=false).
	// Default: they are evicted, after every other candidate.
	NoEvictSoftPinned bool
	// EvictionRatio is the share of the used bytes an eviction frees, 0
	// to 1. Zero means DefaultEvictionRatio; a negative value means 0
	// (evict only what passes the watermark, never for a put that found
	// no room).
	EvictionRatio float64
	// EvictionHighWatermark is the share of the pool's capacity past
	// which a put evicts, 0 to 1. Default: DefaultEvictionHighWatermark.
	EvictionHighWatermark float64
	// ClientTTL is how long a client stays alive after its last ping or
	// mount: past it, its segments are unmounted. Default:
	// DefaultClientTTL.
	ClientTTL time.Duration
	// PutStartDiscard is how old a put that did not end must be before
	// another PutStart of its key discards it. Default:
	// DefaultPutStartDiscard.
	PutStartDiscard time.Duration
	// PutStartRelease is how long after its start a discarded put's
	// places stay reserved (its writer may still be writing them).
	// Default: DefaultPutStartRelease.
	PutStartRelease time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Logger receives segments' and clients' comings and goings at info
	// level, refusals at debug level. Default: slog.Default().
	Logger *slog.Logger
	// SweepInterval is how often the background goroutine looks for dead
	// clients and places whose hold ended. Default: a quarter of
	// ClientTTL, at most a second; negative: no goroutine (tests call
	// Sweep).
	SweepInterval time.Duration
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.LeaseTTL, DefaultLeaseTTL)
	def(&o.SoftPinTTL, DefaultSoftPinTTL)
	def(&o.MaxSoftPinTTL, DefaultMaxSoftPinTTL)
	def(&o.ClientTTL, DefaultClientTTL)
	def(&o.PutStartDiscard, DefaultPutStartDiscard)
	def(&o.PutStartRelease, DefaultPutStartRelease)
	switch {
	case o.EvictionRatio == 0:
		o.EvictionRatio = DefaultEvictionRatio
	case o.EvictionRatio < 0:
		o.EvictionRatio = 0
	case o.EvictionRatio > 1:
		o.EvictionRatio = 1
	}
	if o.EvictionHighWatermark <= 0 || o.EvictionHighWatermark > 1 {
		o.EvictionHighWatermark = DefaultEvictionHighWatermark
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = min(o.ClientTTL/4, time.Second)
	}
}

// segment is a mounted range of a client's memory.
type segment struct {
	client     string // owner's client ID
	name       string
	base, size uint64
	alloc      *allocator
}

// client is a client process the master has heard from.
type client struct {
	seen     time.Time // the latest ping or mount
	segments map[string]*segment
}

// place is one replica's room: size (rounded) bytes at addr in seg.
type place struct {
	seg        *segment
	addr, size uint64
}

// put is a PutStart that has not ended.
type put struct {
	token   uint64
	client  string
	started time.Time
	size    uint64
	places  []place
	softPin time.Duration // 0: none
	// keepSoftPin keeps the object's soft pin (an upsert's PRESERVE).
	keepSoftPin bool
	hardPin     bool
}

// object is a key the master knows: committed (places), being put
// (pending), or both (an upsert).
type object struct {
	size         uint64
	places       []place // the committed value's; nil before the first PutEnd
	pending      *put
	lease        time.Time // read lease ends
	softPinUntil time.Time // zero: not soft-pinned
	hardPin      bool
	touched      uint64 // LRU: the Service's touch count at the latest get or put
}

func (o *object) committed() bool { return o.places != nil }

// held is a place kept out of use until until: the old value of an
// upsert, or a forced removal's, while a reader's lease lasts; a
// discarded put's while its writer may still write.
type held struct {
	place
	until time.Time
}

// Stats is a snapshot of a Service's state, for metrics.
type Stats struct {
	Objects       int    // keys known, committed or being put
	UsedBytes     uint64 // bytes of the segments in places (held ones included)
	Capacity      uint64 // bytes of the mounted segments
	Segments      int
	Clients       int
	Evictions     uint64 // objects evicted
	EvictedBytes  uint64
	LeaseRefusals uint64 // removals refused because of a read lease
	PutStarts     uint64 // PutStarts that reserved places
	PutEnds       uint64 // puts committed
	NoRoom        uint64 // PutStarts refused with CodeNoAvailableHandle
	Gets          uint64 // keys asked by GetReplicaList
	GetHits       uint64 // of them, committed objects
	DeadClients   uint64 // clients declared dead
	AuthFailures  uint64 // calls refused for want of a valid proof of the secret
	// Leading: the Service serves; always when it is no candidate
	// (StartHA), else while it leads.
	Leading bool
}

// Service is the master of Mooncake's store (masterpb.MasterServer): the
// segments clients mount, the objects' places in them, their read leases,
// pins and eviction. It keeps everything in memory (but a leader's
// write-behind to etcd, StartHA): a restart forgets every object, and
// clients mount their segments again when their next Ping says remount.
//
// A Service is safe for concurrent use; every call checks its input and
// changes nothing when it refuses. Close stops its background goroutine.
type Service struct {
	masterpb.UnimplementedMasterServer

	o Options

	mu       sync.Mutex
	clients  map[string]*client
	segments map[string]*segment // by name
	objects  map[string]*object
	held     []held
	touches  uint64
	st       Stats

	authFailures atomic.Uint64

	// Leader and standby (ha.go): the candidacy, nil when the Service is
	// none; the current leadership, nil when it does not lead; the keys
	// changed since the leader's last write to etcd (nil when it does not
	// lead), and how many of them make it write at once (flushKick).
	ha           atomic.Pointer[HA]
	term         atomic.Pointer[term]
	dirtyObj     map[string]struct{}
	dirtySeg     map[string]struct{}
	flushChanges int
	flushKick    chan struct{}

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns an empty Service and starts its sweeper.
func New(o Options) *Service {
	o.defaults()
	s := &Service{
		o:         o,
		clients:   map[string]*client{},
		segments:  map[string]*segment{},
		objects:   map[string]*object{},
		stop:      make(chan struct{}),
		flushKick: make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	if o.SweepInterval > 0 {
		go s.sweeper()
	} else {
		close(s.done)
	}
	return s
}

// Options returns the Service's options, defaults filled in.
func (s *Service) Options() Options { return s.o }

// Close stops the background goroutine. The Service still answers
// calls. Idempotent.
func (s *Service) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *Service) sweeper() {
	defer close(s.done)
	t := time.NewTicker(s.o.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep unmounts the segments of clients not heard from for ClientTTL,
// and frees held places whose hold ended. The background goroutine calls
// it; tests with their own clock call it themselves.
func (s *Service) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	for id, c := range s.clients {
		if now.Sub(c.seen) <= s.o.ClientTTL {
			continue
		}
		s.st.DeadClients++
		s.o.Logger.Info("mooncake master: client dead: no ping within the client TTL; its segments are unmounted",
			"client", clientHex(id), "segments", len(c.segments), "ttl", s.o.ClientTTL)
		for _, seg := range c.segments {
			s.unmountLocked(seg)
		}
		delete(s.clients, id)
	}
	s.releaseHeldLocked(now)
}

// Stats returns a snapshot of the Service's state.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.AuthFailures = s.authFailures.Load()
	t := s.term.Load()
	st.Leading = s.ha.Load() == nil || t != nil && mono() < t.until.Load()
	st.Objects = len(s.objects)
	st.Segments = len(s.segments)
	st.Clients = len(s.clients)
	for _, seg := range s.segments {
		st.Capacity += seg.alloc.capacity()
		st.UsedBytes += seg.alloc.inUse
	}
	return st
}

// usageLocked is the pool's used bytes and capacity.
func (s *Service) usageLocked() (used, capacity uint64) {
	for _, seg := range s.segments {
		capacity += seg.alloc.capacity()
		used += seg.alloc.inUse
	}
	return used, capacity
}

// clientHex names a client ID in logs.
func clientHex(id string) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 2*len(id))
	for i := range len(id) {
		b = append(b, digits[id[i]>>4], digits[id[i]&15])
	}
	return string(b)
}

// checkClient checks a client ID that a call must carry.
func checkClient(id []byte) (string, bool) {
	return string(id), len(id) > 0 && len(id) <= MaxClientIDLen
}

// checkKey returns 0 for a valid key, else its code.
func checkKey(k string) int32 {
	switch {
	case k == "":
		return CodeInvalidParams
	case len(k) > MaxKeyLen:
		return CodeInvalidKey
	}
	return CodeOK
}

func codeResp(code int32, msg string) *masterpb.CodeResponse {
	return &masterpb.CodeResponse{Code: code, Message: msg}
}

// MountSegment adds a client's segment to the pool. Mounting the same
// name again from the same client with the same range is a no-op; from
// another live client it is CodeSegmentExists (a dead client's segment is
// unmounted first).
func (s *Service) MountSegment(_ context.Context, r *masterpb.MountSegmentRequest) (*masterpb.CodeResponse, error) {
	id, ok := checkClient(r.GetClientId())
	if !ok {
		return codeResp(CodeInvalidParams, "mount: client_id: want 1 to 64 bytes"), nil
	}
	sg := r.GetSegment()
	switch {
	case sg == nil || sg.GetName() == "" || len(sg.GetName()) > MaxSegmentNameLen:
		return codeResp(CodeInvalidParams, "mount: segment name: want 1 to 1024 bytes"), nil
	case sg.GetSize() == 0:
		return codeResp(CodeInvalidParams, "mount: segment size 0"), nil
	}
	a := newAllocator(sg.GetBase(), sg.GetSize())
	if a == nil {
		return codeResp(CodeInvalidParams, "mount: the segment's range overflows or holds no 64-byte-aligned block"), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	if old := s.segments[sg.GetName()]; old != nil {
		switch {
		case old.client == id && old.base == sg.GetBase() && old.size == sg.GetSize():
			s.touchClientLocked(id, now)
			return codeResp(CodeOK, ""), nil
		case old.client == id:
			return codeResp(CodeInvalidParams, "mount: segment "+quote(sg.GetName())+" is mounted with another range: unmount it first"), nil
		case s.aliveLocked(old.client, now):
			return codeResp(CodeSegmentExists, "mount: segment "+quote(sg.GetName())+" is another live client's"), nil
		}
		s.o.Logger.Info("mooncake master: a segment of a dead client is mounted again by another; unmounting the old one",
			"segment", sg.GetName(), "old_client", clientHex(old.client), "client", clientHex(id))
		s.unmountLocked(old)
	}
	c := s.touchClientLocked(id, now)
	seg := &segment{client: id, name: sg.GetName(), base: sg.GetBase(), size: sg.GetSize(), alloc: a}
	s.segments[seg.name] = seg
	c.segments[seg.name] = seg
	s.markSegLocked(seg.name)
	s.o.Logger.Info("mooncake master: segment mounted", "segment", seg.name, "client", clientHex(id), "bytes", a.capacity())
	return codeResp(CodeOK, ""), nil
}

// touchClientLocked records that client id was heard from now.
func (s *Service) touchClientLocked(id string, now time.Time) *client {
	c := s.clients[id]
	if c == nil {
		c = &client{segments: map[string]*segment{}}
		s.clients[id] = c
	}
	c.seen = now
	return c
}

func (s *Service) aliveLocked(id string, now time.Time) bool {
	c := s.clients[id]
	return c != nil && now.Sub(c.seen) <= s.o.ClientTTL
}

// UnmountSegment takes a client's segment out of the pool. A name the
// master does not know is a no-op (0), as Mooncake's; another client's
// segment is CodeIllegalClient.
func (s *Service) UnmountSegment(_ context.Context, r *masterpb.UnmountSegmentRequest) (*masterpb.CodeResponse, error) {
	id, ok := checkClient(r.GetClientId())
	if !ok {
		return codeResp(CodeInvalidParams, "unmount: client_id: want 1 to 64 bytes"), nil
	}
	if r.GetName() == "" || len(r.GetName()) > MaxSegmentNameLen {
		return codeResp(CodeInvalidParams, "unmount: segment name: want 1 to 1024 bytes"), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seg := s.segments[r.GetName()]
	if seg == nil {
		return codeResp(CodeOK, ""), nil
	}
	if seg.client != id {
		return codeResp(CodeIllegalClient, "unmount: segment "+quote(r.GetName())+" is another client's"), nil
	}
	s.touchClientLocked(id, s.o.Now())
	s.unmountLocked(seg)
	return codeResp(CodeOK, ""), nil
}

// unmountLocked drops seg: its places leave their objects, and objects
// left with none are gone.
func (s *Service) unmountLocked(seg *segment) {
	delete(s.segments, seg.name)
	if c := s.clients[seg.client]; c != nil {
		delete(c.segments, seg.name)
	}
	s.markSegLocked(seg.name)
	notIn := func(p place) bool { return p.seg == seg }
	dropped := 0
	for key, o := range s.objects {
		if o.committed() && slices.ContainsFunc(o.places, notIn) {
			s.markObjLocked(key)
			o.places = slices.DeleteFunc(o.places, notIn)
			if len(o.places) == 0 {
				o.places = nil
			}
		}
		if p := o.pending; p != nil && slices.ContainsFunc(p.places, notIn) {
			p.places = slices.DeleteFunc(p.places, notIn)
			if len(p.places) == 0 {
				o.pending = nil
			}
		}
		if !o.committed() && o.pending == nil {
			delete(s.objects, key)
			dropped++
		}
	}
	s.held = slices.DeleteFunc(s.held, func(h held) bool { return h.seg == seg })
	s.o.Logger.Info("mooncake master: segment unmounted", "segment", seg.name, "client", clientHex(seg.client), "objects_gone", dropped)
}

// Ping keeps a client alive. A client the master does not know (it
// restarted, or declared the client dead) is told to remount, and known
// from now on.
func (s *Service) Ping(_ context.Context, r *masterpb.PingRequest) (*masterpb.PingResponse, error) {
	id, ok := checkClient(r.GetClientId())
	if !ok {
		return &masterpb.PingResponse{Code: CodeInvalidParams}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, known := s.clients[id]
	s.touchClientLocked(id, s.o.Now())
	return &masterpb.PingResponse{Remount: !known, ClientTtlMs: uint64(s.o.ClientTTL.Milliseconds()), DataPort: uint32(s.o.DataPort)}, nil
}

// PutStart reserves replica places for key (see the package comment).
func (s *Service) PutStart(_ context.Context, r *masterpb.PutStartRequest) (*masterpb.PutStartResponse, error) {
	refuse := func(code int32, msg string) (*masterpb.PutStartResponse, error) {
		return &masterpb.PutStartResponse{Code: code, Message: msg}, nil
	}
	id, ok := checkClient(r.GetClientId())
	if !ok {
		return refuse(CodeInvalidParams, "put: client_id: want 1 to 64 bytes")
	}
	key := r.GetKey()
	if c := checkKey(key); c != CodeOK {
		return refuse(c, "put: key: want 1 to 4096 bytes")
	}
	if r.GetSize() == 0 {
		return refuse(CodeInvalidParams, "put: size 0")
	}
	cfg := r.GetConfig()
	n := int(cfg.GetReplicaNum())
	if n == 0 {
		n = 1
	}
	if n > MaxReplicas {
		return refuse(CodeInvalidParams, "put: replica_num above 16")
	}
	var softPin time.Duration
	switch {
	case cfg.GetSoftPinTtlMs() > 0 && !cfg.GetSoftPin():
		return refuse(CodeInvalidParams, "put: soft_pin_ttl_ms without soft_pin")
	case cfg.GetKeepSoftPin() && cfg.GetSoftPin():
		return refuse(CodeInvalidParams, "put: keep_soft_pin with soft_pin")
	case cfg.GetSoftPinTtlMs() > uint64(s.o.MaxSoftPinTTL.Milliseconds()):
		return refuse(CodeInvalidParams, "put: soft_pin_ttl_ms above the master's max_kv_soft_pin_ttl")
	case cfg.GetSoftPin() && cfg.GetSoftPinTtlMs() > 0:
		softPin = time.Duration(cfg.GetSoftPinTtlMs()) * time.Millisecond
	case cfg.GetSoftPin():
		softPin = s.o.SoftPinTTL
	}
	for _, p := range cfg.GetPreferredSegments() {
		if p == "" || len(p) > MaxSegmentNameLen {
			return refuse(CodeInvalidParams, "put: preferred segment name: want 1 to 1024 bytes")
		}
	}
	if len(cfg.GetPreferredSegments()) > 1024 {
		return refuse(CodeInvalidParams, "put: more than 1024 preferred segments")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	s.releaseHeldLocked(now)
	o := s.objects[key]
	if o != nil && o.pending != nil {
		if now.Sub(o.pending.started) < s.o.PutStartDiscard {
			return refuse(CodeObjectAlreadyExists, "put: the key is being put")
		}
		// A put that never ended: its places stay held while its writer
		// may still write them.
		for _, p := range o.pending.places {
			s.held = append(s.held, held{p, o.pending.started.Add(s.o.PutStartRelease)})
		}
		s.o.Logger.Debug("mooncake master: discarded a put that did not end", "key", key, "started", o.pending.started)
		o.pending = nil
		if !o.committed() {
			delete(s.objects, key)
			o = nil
		}
	}
	if o != nil && !r.GetUpsert() {
		return refuse(CodeObjectAlreadyExists, "put: the key exists (upsert replaces it)")
	}
	places := s.allocLocked(r.GetSize(), n, cfg.GetPreferredSegments(), nil)
	// Short of replicas: evict, when that can help (as Mooncake, not when
	// there are fewer segments than replicas and one has room).
	if len(places) == 0 || len(places) < n && len(s.segments) >= n {
		if s.evictForLocked(now, r.GetSize()*uint64(n-len(places)), key) > 0 {
			places = s.allocLocked(r.GetSize(), n-len(places), cfg.GetPreferredSegments(), places)
		}
	}
	if len(places) == 0 {
		s.st.NoRoom++
		return refuse(CodeNoAvailableHandle, "put: no segment has room for the object; mount more segments or lower eviction_high_watermark_ratio")
	}
	if o == nil {
		o = &object{}
		s.objects[key] = o
	}
	p := &put{token: newToken(), client: id, started: now, size: r.GetSize(), places: places, softPin: softPin,
		keepSoftPin: cfg.GetKeepSoftPin(), hardPin: cfg.GetHardPin()}
	o.pending = p
	s.st.PutStarts++
	if used, capacity := s.usageLocked(); float64(used) > s.o.EvictionHighWatermark*float64(capacity) {
		over := used - uint64(s.o.EvictionHighWatermark*float64(capacity))
		s.evictLocked(now, max(over, uint64(s.o.EvictionRatio*float64(used))), key)
	}
	resp := &masterpb.PutStartResponse{Token: p.token, Replicas: make([]*masterpb.Replica, len(places))}
	for i, pl := range places {
		resp.Replicas[i] = &masterpb.Replica{Segment: pl.seg.name, Address: pl.addr, Size: r.GetSize()}
	}
	return resp, nil
}

func newToken() uint64 {
	for {
		if t := rand.Uint64(); t != 0 {
			return t
		}
	}
}

// allocLocked places up to n replicas of size bytes on distinct
// segments, none of those in have: the preferred segments first, in
// order, then the others from a random start, as Mooncake's random
// strategy. It returns have with the new places appended.
func (s *Service) allocLocked(size uint64, n int, preferred []string, have []place) []place {
	used := func(seg *segment) bool {
		return slices.ContainsFunc(have, func(p place) bool { return p.seg == seg })
	}
	try := func(seg *segment) {
		if seg == nil || used(seg) {
			return
		}
		if addr, rounded, ok := seg.alloc.alloc(size); ok {
			have = append(have, place{seg, addr, rounded})
			n--
		}
	}
	for _, name := range preferred {
		if n == 0 {
			return have
		}
		try(s.segments[name])
	}
	if n == 0 || len(s.segments) == 0 {
		return have
	}
	names := make([]string, 0, len(s.segments))
	for name := range s.segments {
		names = append(names, name)
	}
	slices.Sort(names)
	start := rand.IntN(len(names))
	for i := range names {
		if n == 0 {
			break
		}
		try(s.segments[names[(start+i)%len(names)]])
	}
	return have
}

// freeLocked returns places to their segments' allocators (a place whose
// segment was unmounted since is gone already).
func (s *Service) freeLocked(places []place) {
	for _, p := range places {
		if s.segments[p.seg.name] == p.seg {
			p.seg.alloc.free(p.addr)
		}
	}
}

// releaseHeldLocked frees the held places whose hold ended.
func (s *Service) releaseHeldLocked(now time.Time) {
	s.held = slices.DeleteFunc(s.held, func(h held) bool {
		if now.Before(h.until) {
			return false
		}
		s.freeLocked([]place{h.place})
		return true
	})
}

// endLocked finds the put of key named by token, or says why not.
func (s *Service) endLocked(op string, r *masterpb.PutEndRequest) (*object, *masterpb.CodeResponse) {
	id, ok := checkClient(r.GetClientId())
	if !ok {
		return nil, codeResp(CodeInvalidParams, op+": client_id: want 1 to 64 bytes")
	}
	if c := checkKey(r.GetKey()); c != CodeOK {
		return nil, codeResp(c, op+": key: want 1 to 4096 bytes")
	}
	o := s.objects[r.GetKey()]
	switch {
	case o == nil:
		return nil, codeResp(CodeObjectNotFound, op+": no such key")
	case o.pending == nil || o.pending.token != r.GetToken():
		return nil, codeResp(CodeInvalidParams, op+": the token names no put of this key in progress")
	case o.pending.client != id:
		return nil, codeResp(CodeIllegalClient, op+": the put is another client's")
	}
	return o, nil
}

// PutEnd commits a put: gets see it from now on. An upsert's old places
// are freed once the read lease on the old value ends.
func (s *Service) PutEnd(_ context.Context, r *masterpb.PutEndRequest) (*masterpb.CodeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, refused := s.endLocked("put end", r)
	if refused != nil {
		return refused, nil
	}
	now := s.o.Now()
	p := o.pending
	if o.committed() {
		if now.Before(o.lease) {
			for _, pl := range o.places {
				s.held = append(s.held, held{pl, o.lease})
			}
		} else {
			s.freeLocked(o.places)
		}
	}
	o.places, o.size, o.pending = p.places, p.size, nil
	o.hardPin = p.hardPin
	if !p.keepSoftPin {
		o.softPinUntil = time.Time{}
	}
	if p.softPin > 0 {
		o.softPinUntil = now.Add(p.softPin)
	}
	// Mooncake's PutEnd grants a lease of 0: the lease does not outlast now.
	if o.lease.Before(now) {
		o.lease = now
	}
	s.touchLocked(o)
	s.markObjLocked(r.GetKey())
	s.st.PutEnds++
	return codeResp(CodeOK, ""), nil
}

// PutRevoke abandons a put: its places are freed, and a key that was not
// committed is gone.
func (s *Service) PutRevoke(_ context.Context, r *masterpb.PutEndRequest) (*masterpb.CodeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, refused := s.endLocked("put revoke", r)
	if refused != nil {
		return refused, nil
	}
	s.freeLocked(o.pending.places)
	o.pending = nil
	if !o.committed() {
		delete(s.objects, r.GetKey())
	}
	return codeResp(CodeOK, ""), nil
}

func (s *Service) touchLocked(o *object) {
	s.touches++
	o.touched = s.touches
}

// leaseLocked grants (or extends) a read lease on o.
func (s *Service) leaseLocked(o *object, now time.Time) {
	if until := now.Add(s.o.LeaseTTL); o.lease.Before(until) {
		o.lease = until
	}
	s.touchLocked(o)
}

// GetReplicaList returns each key's size and places and grants a read
// lease on the committed ones.
func (s *Service) GetReplicaList(_ context.Context, r *masterpb.KeysRequest) (*masterpb.GetReplicaListResponse, error) {
	resp := &masterpb.GetReplicaListResponse{Objects: make([]*masterpb.ObjectReplicas, len(r.GetKeys()))}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	for i, k := range r.GetKeys() {
		s.st.Gets++
		if c := checkKey(k); c != CodeOK {
			resp.Objects[i] = &masterpb.ObjectReplicas{Code: c}
			continue
		}
		o := s.objects[k]
		switch {
		case o == nil:
			resp.Objects[i] = &masterpb.ObjectReplicas{Code: CodeObjectNotFound}
			continue
		case !o.committed():
			resp.Objects[i] = &masterpb.ObjectReplicas{Code: CodeReplicaNotReady}
			continue
		}
		s.st.GetHits++
		s.leaseLocked(o, now)
		or := &masterpb.ObjectReplicas{Size: o.size, LeaseMs: uint64(s.o.LeaseTTL.Milliseconds()), Replicas: make([]*masterpb.Replica, len(o.places))}
		for j, p := range o.places {
			or.Replicas[j] = &masterpb.Replica{Segment: p.seg.name, Address: p.addr, Size: o.size}
		}
		resp.Objects[i] = or
	}
	return resp, nil
}

// Exist answers 1 for each key that holds a committed object (granting
// it a read lease, as Mooncake's ExistKey does), 0 for the others, and
// CodeInvalidKey or CodeInvalidParams for a malformed key.
func (s *Service) Exist(_ context.Context, r *masterpb.KeysRequest) (*masterpb.ExistResponse, error) {
	resp := &masterpb.ExistResponse{Codes: make([]int32, len(r.GetKeys()))}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	for i, k := range r.GetKeys() {
		if c := checkKey(k); c != CodeOK {
			resp.Codes[i] = c
			continue
		}
		if o := s.objects[k]; o != nil && o.committed() {
			s.leaseLocked(o, now)
			resp.Codes[i] = 1
		}
	}
	return resp, nil
}

// removableLocked says why o may not be removed now, or 0.
func (s *Service) removableLocked(o *object, force bool, now time.Time) int32 {
	switch {
	case !o.committed() || o.pending != nil:
		return CodeReplicaNotReady
	case !force && now.Before(o.lease):
		return CodeObjectHasLease
	}
	return CodeOK
}

// removeLocked forgets key and frees its places: at once, or, while a
// read lease lasts (a forced removal), once it ends, as an upsert's old
// places are, so that a reader within its lease never reads another
// object's bytes there.
func (s *Service) removeLocked(key string, o *object) {
	if now := s.o.Now(); now.Before(o.lease) {
		for _, pl := range o.places {
			s.held = append(s.held, held{pl, o.lease})
		}
	} else {
		s.freeLocked(o.places)
	}
	delete(s.objects, key)
	s.markObjLocked(key)
}

// Remove removes keys: per key 0, CodeObjectNotFound,
// CodeReplicaNotReady (being put), or CodeObjectHasLease (a read lease
// lasts; force removes it anyway).
func (s *Service) Remove(_ context.Context, r *masterpb.RemoveRequest) (*masterpb.RemoveResponse, error) {
	resp := &masterpb.RemoveResponse{Codes: make([]int32, len(r.GetKeys()))}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	for i, k := range r.GetKeys() {
		if c := checkKey(k); c != CodeOK {
			resp.Codes[i] = c
			continue
		}
		o := s.objects[k]
		if o == nil {
			resp.Codes[i] = CodeObjectNotFound
			continue
		}
		if c := s.removableLocked(o, r.GetForce(), now); c != CodeOK {
			if c == CodeObjectHasLease {
				s.st.LeaseRefusals++
			}
			resp.Codes[i] = c
			continue
		}
		s.removeLocked(k, o)
	}
	return resp, nil
}

// RemoveByRegex removes the committed keys that an RE2 expression
// matches (anywhere in the key, as Mooncake's regex_search), but leased
// ones unless force, and returns how many.
func (s *Service) RemoveByRegex(_ context.Context, r *masterpb.RemoveByRegexRequest) (*masterpb.CountResponse, error) {
	if len(r.GetPattern()) > MaxPatternLen {
		return &masterpb.CountResponse{Count: CodeInvalidParams, Message: "remove by regex: pattern longer than 4096 bytes"}, nil
	}
	re, err := regexp.Compile(r.GetPattern())
	if err != nil {
		return &masterpb.CountResponse{Count: CodeInvalidParams, Message: "remove by regex: " + err.Error()}, nil
	}
	return s.removeWhere(func(k string) bool { return re.MatchString(k) }, r.GetForce()), nil
}

// RemoveAll removes every committed key (but leased ones unless force)
// and returns how many.
func (s *Service) RemoveAll(_ context.Context, r *masterpb.RemoveAllRequest) (*masterpb.CountResponse, error) {
	return s.removeWhere(func(string) bool { return true }, r.GetForce()), nil
}

func (s *Service) removeWhere(match func(string) bool, force bool) *masterpb.CountResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	var n int64
	for k, o := range s.objects {
		if !match(k) {
			continue
		}
		switch s.removableLocked(o, force, now) {
		case CodeOK:
			s.removeLocked(k, o)
			n++
		case CodeObjectHasLease:
			s.st.LeaseRefusals++
		}
	}
	return &masterpb.CountResponse{Count: n}
}
