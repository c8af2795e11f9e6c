package kv

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

func (s *Server) checkKey(key []byte) error {
	if len(key) == 0 {
		return keyError(status.New(codes.InvalidArgument, "empty key"))
	}
	if len(key) > s.opts.MaxKey {
		return keyError(status.Newf(codes.InvalidArgument, "key of %d bytes is longer than the limit of %d", len(key), s.opts.MaxKey))
	}
	return nil
}

// keyError is st with the detail that says the key was refused.
func keyError(st *status.Status) error {
	if d, err := st.WithDetails(&kvpb.ErrorDetail{Reason: kvpb.ErrorDetail_REASON_INVALID_KEY}); err == nil {
		st = d
	}
	return st.Err()
}

// leaseError is a DELETE's refusal of key, held by a read lease for left.
func leaseError(key []byte, left time.Duration) error {
	ms := uint64((left + time.Millisecond - 1) / time.Millisecond)
	st := status.Newf(codes.FailedPrecondition, "key %q has a read lease for %v more: a GET read it; delete with force to remove it anyway", key, time.Duration(ms)*time.Millisecond)
	if d, err := st.WithDetails(&kvpb.ErrorDetail{Reason: kvpb.ErrorDetail_REASON_HAS_LEASE, LeaseLeftMs: ms}); err == nil {
		st = d
	}
	return st.Err()
}

// replicas is a request's replica count: 1 to MaxReplicas, 0 meaning 1.
func replicas(n uint32) (int, error) {
	if n > MaxReplicas {
		return 0, status.Errorf(codes.InvalidArgument, "%d replicas: at most %d", n, MaxReplicas)
	}
	return max(int(n), 1), nil
}

// putMeta checks a PUT's pin and replicas, and returns what commit keeps.
func (s *Server) putMeta(req *kvpb.PutRequest) (putMeta, error) {
	reps, err := replicas(req.Replicas)
	if err != nil {
		return putMeta{}, err
	}
	m := putMeta{reps: uint8(reps)}
	ttl := time.Duration(req.SoftPinTtlMs) * time.Millisecond
	switch {
	case req.SoftPinTtlMs < 0:
		return m, status.Errorf(codes.InvalidArgument, "soft pin TTL of %d ms: must not be negative", req.SoftPinTtlMs)
	case req.SoftPinTtlMs != 0 && req.Pin != kvpb.Pin_PIN_SOFT:
		return m, status.Errorf(codes.InvalidArgument, "a soft pin TTL without a soft pin (pin %v)", req.Pin)
	case req.SoftPinTtlMs > int64(s.opts.MaxSoftPinTTL/time.Millisecond):
		return m, status.Errorf(codes.InvalidArgument, "soft pin TTL of %v is longer than the server's maximum of %v", ttl, s.opts.MaxSoftPinTTL)
	}
	switch req.Pin {
	case kvpb.Pin_PIN_NONE:
	case kvpb.Pin_PIN_SOFT:
		if ttl == 0 {
			ttl = s.opts.SoftPinTTL
		}
		m.pin, m.pinUntil = pinSoft, s.st.now()+int64(ttl)
	case kvpb.Pin_PIN_HARD:
		m.pin = pinHard
	default:
		return m, status.Errorf(codes.InvalidArgument, "pin %d: must be none, soft or hard", req.Pin)
	}
	return m, nil
}

// decodeBuffer decodes the client's buffer descriptor.
func decodeBuffer(b []byte) (xfer.RegionDesc, error) {
	var d xfer.RegionDesc
	if err := d.UnmarshalBinary(b); err != nil {
		return d, status.Errorf(codes.InvalidArgument, "buffer descriptor: %v", err)
	}
	return d, nil
}

// planeErr turns a data-plane failure into a gRPC status.
func planeErr(ctx context.Context, what string, d xfer.RegionDesc, err error) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, xfer.ErrRemoteAccess), errors.Is(err, xfer.ErrNotRegistered), errors.Is(err, xfer.ErrTooLarge):
		return status.Errorf(codes.InvalidArgument, "%s buffer %s: refused by the client's engine: %v", what, d, err)
	case errors.Is(err, xfer.ErrClosed), errors.Is(err, xfer.ErrPeerLost):
		return status.Errorf(codes.Unavailable, "%s buffer: the client's data-plane connection is gone: %v", what, err)
	}
	return status.Errorf(codes.Unavailable, "%s buffer %s: %v", what, d, err)
}

// Get implements kvpb.KVServer: it WRITEs the value into the client's buffer,
// or returns it inline when it is small enough for both sides.
func (s *Server) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	r, _, err := s.get(ctx, req, 0, false) // notify is for the data plane only
	return r, err
}

// get serves a GET. With notify (a data-plane request with req.Notify), a
// value that goes into the client's buffer is written with WriteNotify,
// whose notification, carrying the low 32 bits of the request's id, is the
// answer: get then reports notified, and there is no response to send. On
// the data plane the buffer's owner is the sender (owner), whom the
// notification reaches.
func (s *Server) get(ctx context.Context, req *kvpb.GetRequest, id uint64, notify bool) (_ *kvpb.GetResponse, notified bool, _ error) {
	s.gets.Add(1)
	if err := s.checkSession(req.ServerId); err != nil {
		return nil, false, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return nil, false, err
	}
	var d xfer.RegionDesc
	if len(req.Buffer) > 0 {
		var err error
		if d, err = decodeBuffer(req.Buffer); err != nil {
			return nil, false, err
		}
	}
	// In a cluster, a server answers the keys it owns, and those it holds
	// a replica of as one of their first servers.
	sl, inMem := s.fence.Load().acquire(s.st, req.Key)
	if sl != nil && !inMem {
		// Only on disk: into the pool first, then served as any other.
		if err := s.st.disk.load(ctx, s.st, sl); err != nil {
			s.st.release(sl)
			switch {
			case ctx.Err() != nil:
				return nil, false, status.FromContextError(ctx.Err()).Err()
			case errors.Is(err, errFull):
				// No room in the pool to read it into: every value there
				// is leased, pinned or being read.
				return nil, false, status.Errorf(codes.ResourceExhausted, "key %q is on disk, and %v", req.Key, err)
			}
			sl = nil
		} else {
			s.st.disk.hits.Add(1)
		}
	}
	if sl == nil {
		s.misses.Add(1)
		return nil, false, status.Errorf(codes.NotFound, "not found: key %q", req.Key)
	}
	defer s.st.release(sl)
	s.hits.Add(1)
	n := uint64(sl.n)
	if n <= req.InlineMax && int(n) <= s.inlineMax(s.transportOf(ctx, d)) {
		s.inlineBytes.Add(n)
		s.inlineReqs.Add(1)
		return &kvpb.GetResponse{Length: n, Version: sl.ver, Inline: true, Value: append([]byte(nil), sl.value()...)}, false, nil
	}
	if d.Len < n {
		st := status.Newf(codes.FailedPrecondition, "value of key %q is %d bytes and the buffer holds %d: retry with a buffer of at least %d bytes", req.Key, n, d.Len, n)
		if dst, err := st.WithDetails(&kvpb.BufferTooSmall{Needed: n, Have: d.Len}); err == nil {
			st = dst
		}
		return nil, false, st.Err()
	}
	if n == 0 {
		return &kvpb.GetResponse{Version: sl.ver}, false, nil
	}
	p, err := s.owner(ctx, d)
	if err != nil {
		return nil, false, err
	}
	notified = notify
	if notified {
		err = p.WriteNotify(ctx, sl.value(), d.At(0), uint32(id))
	} else {
		err = p.Write(ctx, sl.value(), d.At(0))
	}
	if err != nil {
		return nil, false, planeErr(ctx, "get", d, err)
	}
	s.planeBytes.Add(n)
	s.planeReqs.Add(1)
	if notified {
		return nil, true, nil
	}
	return &kvpb.GetResponse{Length: n, Version: sl.ver}, false, nil
}

// Put implements kvpb.KVServer: it reserves a slot, READs the value from the
// client's buffer into it (or copies the inline value), and only then makes
// it the key's value. A PUT that fails on the way frees its slot.
func (s *Server) Put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return s.put(ctx, req)
}

// put serves a PUT, from gRPC or the data plane.
func (s *Server) put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	ver, evicted, err := s.putValue(ctx, req)
	if err != nil {
		return nil, err
	}
	return &kvpb.PutResponse{Version: ver, Evicted: evicted}, nil
}

// putValue is put without a response to allocate: it returns the value's
// version and how many values the PUT evicted.
func (s *Server) putValue(ctx context.Context, req *kvpb.PutRequest) (ver uint64, nevicted uint32, _ error) {
	s.puts.Add(1)
	if err := s.checkSession(req.ServerId); err != nil {
		return 0, 0, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return 0, 0, err
	}
	var (
		d      xfer.RegionDesc
		n      int
		inline bool
	)
	switch src := req.Source.(type) {
	case *kvpb.PutRequest_Value:
		if len(src.Value) > s.opts.InlineMax {
			return 0, 0, status.Errorf(codes.InvalidArgument, "inline value of %d bytes is larger than the inline limit of %d: send a buffer", len(src.Value), s.opts.InlineMax)
		}
		n, inline = len(src.Value), true
	case *kvpb.PutRequest_Buffer:
		var err error
		if d, err = decodeBuffer(src.Buffer); err != nil {
			return 0, 0, err
		}
		if d.Len > uint64(s.opts.MaxValue) {
			return 0, 0, s.tooLarge(d.Len)
		}
		n = int(d.Len)
	default:
		return 0, 0, status.Error(codes.InvalidArgument, "put needs a value: a buffer or an inline value")
	}
	if n > s.opts.MaxValue {
		return 0, 0, s.tooLarge(uint64(n))
	}
	meta := putMeta{reps: 1}
	if req.Pin != 0 || req.SoftPinTtlMs != 0 || req.Replicas != 0 {
		var err error
		if meta, err = s.putMeta(req); err != nil {
			return 0, 0, err
		}
	}
	f := s.fence.Load()
	gen, err := f.admit(req.Key, int(meta.reps))
	if err != nil {
		return 0, 0, err
	}
	b, evicted, err := s.st.reserve(ctx, n)
	if err != nil {
		if errors.Is(err, errFull) {
			return 0, 0, status.Errorf(codes.ResourceExhausted, "%v", err)
		}
		if ctx.Err() != nil {
			return 0, 0, status.FromContextError(ctx.Err()).Err()
		}
		return 0, 0, status.Errorf(codes.Internal, "reserve %d bytes: %v", n, err)
	}
	if inline {
		copy(b.Bytes(), req.GetValue())
		s.inlineBytes.Add(uint64(n))
		s.inlineReqs.Add(1)
	} else if n > 0 {
		p, err := s.owner(ctx, d)
		if err == nil {
			err = p.Read(ctx, b.Bytes()[:n], d.At(0))
			if err != nil {
				err = planeErr(ctx, "put", d, err)
			}
		}
		if err != nil {
			s.st.abort(b)
			return 0, 0, err
		}
		s.planeBytes.Add(uint64(n))
		s.planeReqs.Add(1)
	}
	if err := f.hold(req.Key, gen, int(meta.reps)); err != nil {
		s.st.abort(b)
		return 0, 0, err
	}
	meta.vgen = gen
	ver, old := s.st.commit(req.Key, b, n, meta)
	f.release()
	s.st.disk.forget(s.st, old)
	return ver, uint32(evicted), nil
}

func (s *Server) tooLarge(n uint64) error {
	capacity := s.e.Pool().Stats().Capacity
	if n > capacity {
		return status.Errorf(codes.InvalidArgument, "value of %d bytes is larger than the whole pool (%d bytes)", n, capacity)
	}
	return status.Errorf(codes.InvalidArgument, "value of %d bytes is larger than the limit of %d", n, s.opts.MaxValue)
}

// Delete implements kvpb.KVServer.
func (s *Server) Delete(ctx context.Context, req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return s.delete(req)
}

// delete serves a DELETE, from gRPC or the data plane.
func (s *Server) delete(req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	s.deletes.Add(1)
	if err := s.checkKey(req.Key); err != nil {
		return nil, err
	}
	reps, err := replicas(req.Replicas)
	if err != nil {
		return nil, err
	}
	f := s.fence.Load()
	gen, err := f.admit(req.Key, reps)
	if err != nil {
		return nil, err
	}
	if err := f.hold(req.Key, gen, reps); err != nil {
		return nil, err
	}
	found, left, old := s.st.remove(req.Key, req.Force)
	f.release()
	s.st.disk.forget(s.st, old)
	switch {
	case !found:
		return nil, status.Errorf(codes.NotFound, "not found: key %q", req.Key)
	case left > 0:
		return nil, leaseError(req.Key, left)
	}
	return &kvpb.DeleteResponse{}, nil
}
