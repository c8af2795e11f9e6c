package kv

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

func (c *Client) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("kv: empty key: %w", ErrInvalidKey)
	}
	return nil
}

// Get returns the value of key in a new slice. The server writes it into a
// buffer of the client's pool (or returns it inline when it is small), and
// Get copies it out; GetInto avoids the copy.
func (c *Client) Get(ctx context.Context, key string) (_ []byte, err error) {
	if c.metrics != nil {
		defer c.metrics.done(cGet, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	v, err := c.getValue(ctx, key)
	return v, c.bounded(ctx, "get", err)
}

// getValue is Get.
func (c *Client) getValue(ctx context.Context, key string) ([]byte, error) {
	size := c.opts.GetBuffer
	if uint64(size) > c.poolCap {
		size = int(c.poolCap)
	}
	for {
		buf, err := c.e.AllocWait(ctx, size)
		if err != nil {
			return nil, fmt.Errorf("kv: get buffer of %d bytes: %w", size, err)
		}
		var out []byte
		n, inline, _, err := c.get(ctx, key, buf, true, func() { c.e.Free(buf) })
		if errors.Is(err, errLate) {
			return nil, err // buf is freed once the server is done with it
		}
		if err == nil {
			if inline != nil {
				out = inline
			} else {
				out = append([]byte(nil), buf.Bytes()[:n]...)
			}
		}
		c.e.Free(buf)
		var small *BufferTooSmallError
		if errors.As(err, &small) && int(small.Needed) > size {
			if small.Needed > c.poolCap {
				return nil, &BufferTooSmallError{Needed: small.Needed, Have: c.poolCap, Pool: true}
			}
			size = int(small.Needed) // it grew meanwhile: try again
			continue
		}
		return out, err
	}
}

// GetInto has the server write the value of key straight into buf, a buffer
// of the client's engine (Engine().Alloc), and returns its length. A value
// larger than buf gets a *BufferTooSmallError that states the size needed.
func (c *Client) GetInto(ctx context.Context, key string, buf xfer.Buffer) (_ int, err error) {
	if c.metrics != nil {
		defer c.metrics.done(cGet, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, _, _, err := c.get(ctx, key, buf, false, nil)
	return n, c.bounded(ctx, "get", err)
}

// get runs one GET into buf. With wantInline, an inline value is returned in
// a slice of its own instead of being copied into buf.
//
// If ctx ends while the server may still write into buf, and late is not
// nil, get returns an error matching errLate and runs late once the server
// is done with buf.
func (c *Client) get(ctx context.Context, key string, buf xfer.Buffer, wantInline bool, late func()) (n int, inline []byte, ver uint64, err error) {
	if c.msgs != nil {
		// The data-plane request path, without a GetRequest: the request
		// is encoded straight into the message, and the call (with room
		// for its response) comes from a pool.
		err = c.retry(ctx, func(s *session) error {
			inlineMax := min(s.inlineMax, uint64(buf.Len()))
			pc := callPool.Get().(*pendingCall)
			pc.dst, pc.notify = buf.Bytes(), true
			desc, err := buf.Desc().AppendBinary(pc.desc[:0])
			if err != nil {
				return err
			}
			pc.size = requestSize(len(key), len(desc), len(s.id))
			pc.key, pc.reqBytes, pc.inlineMax = unsafe.Slice(unsafe.StringData(key), len(key)), desc, inlineMax
			pc.sid = unsafe.Slice(unsafe.StringData(s.id), len(s.id))
			r, done, err := c.callWith(ctx, s, pc, pc.encGet, late)
			if err == nil {
				// An inline value is in buf already (onResponse).
				n, ver = int(r.GetGet().GetLength()), r.GetGet().GetVersion()
			}
			if done {
				pc.clearRequest()
				pc.dst, pc.late, pc.size, pc.notify = nil, nil, 0, false
				callPool.Put(pc)
			}
			return err
		})
		if err != nil {
			return 0, nil, 0, err
		}
		return n, nil, ver, nil
	}
	desc, err := buf.Desc().MarshalBinary()
	if err != nil {
		return 0, nil, 0, err
	}
	req := &kvpb.GetRequest{Key: []byte(key), Buffer: desc}
	err = c.retry(ctx, func(s *session) error {
		req.InlineMax = min(s.inlineMax, uint64(buf.Len()))
		req.ServerId = []byte(s.id)
		resp, err := c.rpc.Get(ctx, req, c.waitOpt)
		if err != nil {
			if ctx.Err() != nil && late != nil {
				// The cancellation reaches the server's write soon, but
				// no answer says when: wait generously.
				time.AfterFunc(lateGRPC, late)
				return fmt.Errorf("%w: %w", ctx.Err(), errLate)
			}
			return err
		}
		n, ver = int(resp.Length), resp.Version
		if resp.Inline {
			if len(resp.Value) != n || n > buf.Len() {
				return fmt.Errorf("kv: server sent an inline value of %d bytes for a length of %d", len(resp.Value), n)
			}
			inline = resp.Value
		}
		return nil
	})
	if err != nil {
		return 0, nil, 0, err
	}
	if inline != nil && !wantInline {
		copy(buf.Bytes(), inline)
		inline = nil
	}
	return n, inline, ver, nil
}

// Put stores value under key, overwriting any value it had. A value larger
// than the inline limit is copied into a buffer of the client's pool for the
// server to read; PutBuffer avoids the copy.
func (c *Client) Put(ctx context.Context, key string, value []byte) (err error) {
	return c.putWith(ctx, key, value, putFields{})
}

// PutWith is Put with options: a soft or hard pin.
func (c *Client) PutWith(ctx context.Context, key string, value []byte, o PutOptions) error {
	f, err := o.fields()
	if err != nil {
		return err
	}
	return c.putWith(ctx, key, value, f)
}

func (c *Client) putWith(ctx context.Context, key string, value []byte, f putFields) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cPut, time.Now(), &err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err = c.putValue(ctx, key, value, f)
	return c.bounded(ctx, "put", err)
}

// putValue is Put, returning the stored value's version.
func (c *Client) putValue(ctx context.Context, key string, value []byte, f putFields) (uint64, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	sess, err := c.liveSession(ctx)
	if err != nil {
		return 0, err
	}
	if uint64(len(value)) <= sess.inlineMax {
		if f != (putFields{}) {
			return c.put(ctx, f.inline(key, value))
		}
		return c.putInline(ctx, key, value)
	}
	if sess.maxValue > 0 && uint64(len(value)) > sess.maxValue {
		return 0, fmt.Errorf("kv: value of %d bytes is larger than the server's limit of %d: %w", len(value), sess.maxValue, ErrInvalid)
	}
	buf, err := c.e.AllocWait(ctx, len(value))
	if err != nil {
		return 0, fmt.Errorf("kv: put buffer of %d bytes: %w", len(value), err)
	}
	defer c.e.Free(buf)
	copy(buf.Bytes(), value)
	return c.putBuffer(ctx, key, buf, len(value), f)
}

// PutBuffer stores the first n bytes of buf, a buffer of the client's
// engine, under key: the server reads them straight from buf. buf must not
// change until PutBuffer returns.
func (c *Client) PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) (err error) {
	return c.putBufferWith(ctx, key, buf, n, putFields{})
}

// PutBufferWith is PutBuffer with options: a soft or hard pin.
func (c *Client) PutBufferWith(ctx context.Context, key string, buf xfer.Buffer, n int, o PutOptions) error {
	f, err := o.fields()
	if err != nil {
		return err
	}
	return c.putBufferWith(ctx, key, buf, n, f)
}

func (c *Client) putBufferWith(ctx context.Context, key string, buf xfer.Buffer, n int, f putFields) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cPut, time.Now(), &err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err = c.putBuffer(ctx, key, buf, n, f)
	return c.bounded(ctx, "put", err)
}

func (c *Client) putBuffer(ctx context.Context, key string, buf xfer.Buffer, n int, f putFields) (uint64, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	if n < 0 || n > buf.Len() {
		return 0, fmt.Errorf("kv: put of %d bytes from a buffer of %d: %w", n, buf.Len(), ErrInvalid)
	}
	sess, err := c.liveSession(ctx)
	if err != nil {
		return 0, err
	}
	if uint64(n) <= sess.inlineMax { // faster inline: see DefaultInlineMax
		if f != (putFields{}) {
			return c.put(ctx, f.inline(key, buf.Bytes()[:n]))
		}
		return c.putInline(ctx, key, buf.Bytes()[:n])
	}
	d, err := buf.Desc().Slice(0, uint64(n))
	if err != nil {
		return 0, err
	}
	desc, err := d.MarshalBinary()
	if err != nil {
		return 0, err
	}
	req := f.request(key)
	req.Source = &kvpb.PutRequest_Buffer{Buffer: desc}
	return c.put(ctx, req)
}

// putInline is put of an inline value on the data-plane request path:
// without a PutRequest, the request is encoded straight into the message
// (the value's one copy), and the call, with room for its response, comes
// from a pool.
func (c *Client) putInline(ctx context.Context, key string, value []byte) (uint64, error) {
	if c.msgs == nil {
		return c.put(ctx, &kvpb.PutRequest{Key: []byte(key), Source: &kvpb.PutRequest_Value{Value: value}})
	}
	var ver uint64
	err := c.retry(ctx, func(s *session) error {
		pc := callPool.Get().(*pendingCall)
		pc.size = requestSize(len(key), len(value), len(s.id))
		pc.key, pc.reqBytes = unsafe.Slice(unsafe.StringData(key), len(key)), value
		pc.sid = unsafe.Slice(unsafe.StringData(s.id), len(s.id))
		r, done, err := c.callWith(ctx, s, pc, pc.encPut, nil)
		if err == nil {
			ver = r.GetPut().GetVersion()
		}
		if done {
			pc.clearRequest()
			pc.dst, pc.late, pc.size = nil, nil, 0
			callPool.Put(pc)
		}
		return err
	})
	return ver, err
}

func (c *Client) put(ctx context.Context, req *kvpb.PutRequest) (uint64, error) {
	var ver uint64
	err := c.retry(ctx, func(s *session) error {
		req.ServerId = []byte(s.id)
		if c.msgs != nil {
			r, err := c.call(ctx, s, &kvpb.Request{Op: &kvpb.Request_Put{Put: req}}, nil, nil)
			if err == nil {
				ver = r.GetPut().GetVersion()
			}
			return err
		}
		resp, err := c.rpc.Put(ctx, req, c.waitOpt)
		if err == nil {
			ver = resp.Version
		}
		return err
	})
	return ver, err
}

// Delete removes key; a missing key gets an error matching ErrNotFound, and
// a value a GET read within the server's lease TTL a *LeaseError
// (ErrHasLease): DeleteWith can force it.
func (c *Client) Delete(ctx context.Context, key string) error {
	return c.delete(ctx, key, false, 0)
}

// DeleteWith is Delete with options.
func (c *Client) DeleteWith(ctx context.Context, key string, o DeleteOptions) error {
	return c.delete(ctx, key, o.Force, 0)
}

func (c *Client) delete(ctx context.Context, key string, force bool, reps uint32) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cDelete, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	req := &kvpb.DeleteRequest{Key: []byte(key), Force: force, Replicas: reps}
	err = c.retry(ctx, func(s *session) error {
		if c.msgs != nil {
			_, err := c.call(ctx, s, &kvpb.Request{Op: &kvpb.Request_Delete{Delete: req}}, nil, nil)
			return err
		}
		_, err := c.rpc.Delete(ctx, req, c.waitOpt)
		return err
	})
	return c.bounded(ctx, "delete", err)
}

// PutOptions are a PUT's options besides its key and value. The zero
// value is a plain PUT: an unpinned value, evicted least recently used
// first.
type PutOptions struct {
	// SoftPin pins the value softly: it is evicted only after every
	// unpinned value (and never, on a server with KeepSoftPinned) until
	// the pin ends.
	SoftPin bool
	// SoftPinTTL is how long the soft pin lasts, in whole milliseconds
	// (rounded up); at most the server's MaxSoftPinTTL, else the PUT fails
	// with ErrInvalid. Default: the server's SoftPinTTL.
	SoftPinTTL time.Duration
	// HardPin pins the value hard: it is never evicted, only deleted or
	// overwritten. A pool full of hard-pinned values refuses PUTs with
	// ErrFull.
	HardPin bool
}

// DeleteOptions are a DELETE's options.
type DeleteOptions struct {
	// Force removes the value even while a GET's read lease holds it.
	Force bool
}

// putFields are the PutRequest fields of PutOptions, and a Cluster's
// replica count.
type putFields struct {
	pin      kvpb.Pin
	ttlMs    int64
	replicas uint32
}

// fields checks o and returns its request fields.
func (o PutOptions) fields() (putFields, error) {
	var f putFields
	switch {
	case o.SoftPin && o.HardPin:
		return f, fmt.Errorf("kv: a soft and a hard pin: choose one: %w", ErrInvalid)
	case o.SoftPinTTL < 0:
		return f, fmt.Errorf("kv: soft pin TTL %v: must not be negative: %w", o.SoftPinTTL, ErrInvalid)
	case o.SoftPinTTL > 0 && !o.SoftPin:
		return f, fmt.Errorf("kv: soft pin TTL %v without SoftPin: %w", o.SoftPinTTL, ErrInvalid)
	case o.SoftPin:
		f.pin = kvpb.Pin_PIN_SOFT
		f.ttlMs = int64((o.SoftPinTTL + time.Millisecond - 1) / time.Millisecond)
	case o.HardPin:
		f.pin = kvpb.Pin_PIN_HARD
	}
	return f, nil
}

// request is a PutRequest of key with f's fields and no source.
func (f putFields) request(key string) *kvpb.PutRequest {
	return &kvpb.PutRequest{Key: []byte(key), Pin: f.pin, SoftPinTtlMs: f.ttlMs, Replicas: f.replicas}
}

// inline is f's PutRequest of key with value inline.
func (f putFields) inline(key string, value []byte) *kvpb.PutRequest {
	r := f.request(key)
	r.Source = &kvpb.PutRequest_Value{Value: value}
	return r
}
