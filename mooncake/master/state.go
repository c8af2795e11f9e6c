package master

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The leader's state in etcd (see ha.go), one key per segment and per
// committed object, JSON values:
//
//	PREFIX/segments/NAME  {"client": base64 ID, "base": N, "size": N}
//	PREFIX/objects/KEY    {"size": N, "places": [{"segment": NAME, "addr": N, "size": N}],
//	                       "soft_pin_until_ms": UNIX_MS, "hard_pin": true}
//
// A place's size is the allocator's (rounded up to 64 bytes). Read
// leases, the LRU order, puts in progress and held places are not kept.

type segRecord struct {
	Client []byte `json:"client"`
	Base   uint64 `json:"base"`
	Size   uint64 `json:"size"`
}

type placeRecord struct {
	Segment string `json:"segment"`
	Addr    uint64 `json:"addr"`
	Size    uint64 `json:"size"`
}

type objRecord struct {
	Size         uint64        `json:"size"`
	Places       []placeRecord `json:"places"`
	SoftPinUntil int64         `json:"soft_pin_until_ms,omitempty"`
	HardPin      bool          `json:"hard_pin,omitempty"`
}

func segmentsPrefix(cluster string) string { return Prefix(cluster) + "segments/" }
func objectsPrefix(cluster string) string  { return Prefix(cluster) + "objects/" }

// markObjLocked records that key's committed value changed, for the
// leader's next write.
func (s *Service) markObjLocked(key string) {
	if s.dirtyObj != nil {
		s.dirtyObj[key] = struct{}{}
		s.kickLocked()
	}
}

// markSegLocked records that the segment name was mounted or unmounted.
func (s *Service) markSegLocked(name string) {
	if s.dirtySeg != nil {
		s.dirtySeg[name] = struct{}{}
		s.kickLocked()
	}
}

func (s *Service) kickLocked() {
	if len(s.dirtyObj)+len(s.dirtySeg) >= s.flushChanges {
		select {
		case s.flushKick <- struct{}{}:
		default:
		}
	}
}

// becomeLeader replaces the Service's state with the one loaded (raw
// records by segment name and object key), and starts term t. Records
// that do not load (undecodable, a place on no loaded segment or
// overlapping another) are dropped, and marked to be written back. It
// returns the number of objects loaded.
func (s *Service) becomeLeader(t *term, segs, objs map[string][]byte, flushChanges int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	s.clients = map[string]*client{}
	s.segments = map[string]*segment{}
	s.objects = map[string]*object{}
	s.held = nil
	s.dirtyObj, s.dirtySeg = map[string]struct{}{}, map[string]struct{}{}
	s.flushChanges = flushChanges
	for name, raw := range segs {
		var r segRecord
		var a *allocator
		if json.Unmarshal(raw, &r) == nil && len(r.Client) > 0 {
			a = newAllocator(r.Base, r.Size)
		}
		if a == nil {
			s.o.Logger.Warn("mooncake master: a segment record in etcd does not load; dropped", "segment", name)
			s.dirtySeg[name] = struct{}{}
			continue
		}
		id := string(r.Client)
		c := s.touchClientLocked(id, now)
		seg := &segment{client: id, name: name, base: r.Base, size: r.Size, alloc: a}
		s.segments[name] = seg
		c.segments[name] = seg
	}
	for key, raw := range objs {
		var r objRecord
		if err := json.Unmarshal(raw, &r); err != nil || checkKey(key) != CodeOK || r.Size == 0 {
			s.o.Logger.Warn("mooncake master: an object record in etcd does not load; dropped", "key", key)
			s.dirtyObj[key] = struct{}{}
			continue
		}
		o := &object{size: r.Size, lease: now.Add(s.o.LeaseTTL), hardPin: r.HardPin}
		if r.SoftPinUntil != 0 {
			o.softPinUntil = time.UnixMilli(r.SoftPinUntil)
		}
		for _, p := range r.Places {
			seg := s.segments[p.Segment]
			if seg == nil || p.Size < r.Size || !seg.alloc.take(p.Addr, p.Size) {
				s.dirtyObj[key] = struct{}{}
				continue
			}
			o.places = append(o.places, place{seg, p.Addr, p.Size})
		}
		if len(o.places) == 0 {
			continue
		}
		s.touchLocked(o)
		s.objects[key] = o
	}
	s.term.Store(t)
	return len(s.objects)
}

// stepDown ends term t, if it is the current one: the Service forgets
// its state and refuses calls.
func (s *Service) stepDown(t *term) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term.Load() != t {
		return
	}
	s.term.Store(nil)
	s.clients = map[string]*client{}
	s.segments = map[string]*segment{}
	s.objects = map[string]*object{}
	s.held = nil
	s.dirtyObj, s.dirtySeg = nil, nil
}

// stateOp is one key of the leader's state to write: its value, or nil
// to delete it.
type stateOp struct {
	seg  bool   // a segment's (else an object's)
	name string // the segment's name or the object's key
	val  []byte
}

// takeDirty returns the changes since the last call, as they are now,
// and forgets them; ok is false when t is no longer the current term.
func (s *Service) takeDirty(t *term) (ops []stateOp, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term.Load() != t {
		return nil, false
	}
	for name := range s.dirtySeg {
		op := stateOp{seg: true, name: name}
		if seg := s.segments[name]; seg != nil {
			op.val, _ = json.Marshal(segRecord{Client: []byte(seg.client), Base: seg.base, Size: seg.size})
		}
		ops = append(ops, op)
	}
	for key := range s.dirtyObj {
		op := stateOp{name: key}
		if o := s.objects[key]; o != nil && o.committed() {
			r := objRecord{Size: o.size, HardPin: o.hardPin, Places: make([]placeRecord, len(o.places))}
			if !o.softPinUntil.IsZero() {
				r.SoftPinUntil = o.softPinUntil.UnixMilli()
			}
			for i, p := range o.places {
				r.Places[i] = placeRecord{Segment: p.seg.name, Addr: p.addr, Size: p.size}
			}
			op.val, _ = json.Marshal(r)
		}
		ops = append(ops, op)
	}
	clear(s.dirtySeg)
	clear(s.dirtyObj)
	return ops, true
}

// requeue marks ops' keys changed again (their write failed), if t is
// still the current term.
func (s *Service) requeue(t *term, ops []stateOp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term.Load() != t {
		return
	}
	for _, op := range ops {
		if op.seg {
			s.dirtySeg[op.name] = struct{}{}
		} else {
			s.dirtyObj[op.name] = struct{}{}
		}
	}
}

// flush writes the changes of term t to etcd, in transactions of at most
// maxTxnOps keys and maxTxnBytes, each guarded by t's election key still
// being this master's (errDeposed when it is not). Keys whose write
// failed are marked changed again.
func (h *HA) flush(ctx context.Context, t *term) error {
	ops, ok := h.s.takeDirty(t)
	if !ok {
		return nil
	}
	segs, objs := segmentsPrefix(h.o.Cluster), objectsPrefix(h.o.Cluster)
	for len(ops) > 0 {
		n, bytes := 0, 0
		var then []clientv3.Op
		for n < len(ops) && n < maxTxnOps {
			op := ops[n]
			k := objs + op.name
			if op.seg {
				k = segs + op.name
			}
			if n > 0 && bytes+len(k)+len(op.val) > maxTxnBytes {
				break
			}
			bytes += len(k) + len(op.val)
			if op.val == nil {
				then = append(then, clientv3.OpDelete(k))
			} else {
				then = append(then, clientv3.OpPut(k, string(op.val)))
			}
			n++
		}
		tctx, cancel := context.WithTimeout(ctx, h.o.DialTimeout)
		r, err := h.cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).Then(then...).Commit()
		cancel()
		if err != nil {
			h.s.requeue(t, ops)
			return fmt.Errorf("etcd transaction of %d keys: %w", n, err)
		}
		if !r.Succeeded {
			return errDeposed
		}
		ops = ops[n:]
	}
	return nil
}

// load reads the state the leaders wrote: raw records by segment name
// and by object key, both at one revision.
func (h *HA) load(ctx context.Context) (segs, objs map[string][]byte, err error) {
	segs, rev, err := h.getPrefix(ctx, segmentsPrefix(h.o.Cluster), 0)
	if err != nil {
		return nil, nil, err
	}
	objs, _, err = h.getPrefix(ctx, objectsPrefix(h.o.Cluster), rev)
	return segs, objs, err
}

// getPrefix reads every key under prefix, a page at a time, at revision
// rev (0: the current one, which it returns).
func (h *HA) getPrefix(ctx context.Context, prefix string, rev int64) (map[string][]byte, int64, error) {
	out := map[string][]byte{}
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		gctx, cancel := context.WithTimeout(ctx, h.o.DialTimeout)
		r, err := h.cli.Get(gctx, from, opts...)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		for _, kv := range r.Kvs {
			out[string(kv.Key[len(prefix):])] = kv.Value
		}
		if !r.More || len(r.Kvs) == 0 {
			return out, rev, nil
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}
