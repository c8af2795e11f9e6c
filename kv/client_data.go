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
		return fmt.Errorf("kv: empty key: %w", ErrInvalid)
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
	if c.metrics != nil {
		defer c.metrics.done(cPut, time.Now(), &err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err = c.putValue(ctx, key, value)
	return c.bounded(ctx, "put", err)
}

// putValue is Put, returning the stored value's version.
func (c *Client) putValue(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	sess, err := c.liveSession(ctx)
	if err != nil {
		return 0, err
	}
	if uint64(len(value)) <= sess.inlineMax {
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
	return c.putBuffer(ctx, key, buf, len(value))
}

// PutBuffer stores the first n bytes of buf, a buffer of the client's
// engine, under key: the server reads them straight from buf. buf must not
// change until PutBuffer returns.
func (c *Client) PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cPut, time.Now(), &err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err = c.putBuffer(ctx, key, buf, n)
	return c.bounded(ctx, "put", err)
}

func (c *Client) putBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) (uint64, error) {
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
	return c.put(ctx, &kvpb.PutRequest{Key: []byte(key), Source: &kvpb.PutRequest_Buffer{Buffer: desc}})
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

// Delete removes key; a missing key gets an error matching ErrNotFound.
func (c *Client) Delete(ctx context.Context, key string) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cDelete, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	req := &kvpb.DeleteRequest{Key: []byte(key)}
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
