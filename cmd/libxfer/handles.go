package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fxamacker/cbor/v2"

	"github.com/xferio/xfer/connector"
)

// The handle tables. A handle is a positive integer, never reused within a
// process; 0 is never a handle.
var (
	handleMu   sync.Mutex
	nextHandle atomic.Int64
	conns      = map[int64]*conn{}
	buffers    = map[int64]*buffer{}
)

// conn is an open connector and the buffers it handed out. Every call on
// it counts itself in calls while it runs, and closeConn waits for them
// before it closes the engine, which unmaps the pool: a call copying into
// the pool (a put) never races the unmapping. ctx ends at close, and with
// it every call's context, so that a call waiting (for memory, for a
// value) ends then.
type conn struct {
	c       *connector.Connector
	buffers map[int64]struct{}
	calls   sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// buffer is a connector.Buffer handed out by a get or an alloc.
type buffer struct {
	conn int64
	b    *connector.Buffer
}

// Kinds of value, as the ABI numbers them (connector.Kind's values).
const (
	kindBytes  = int32(connector.KindBytes)
	kindTensor = int32(connector.KindTensor)
	kindObject = int32(connector.KindObject)
	// kindPickle is an object put from pickled bytes (see pickleTag).
	kindPickle = int32(4)
)

func newHandle() int64 { return nextHandle.Add(1) }

// openConn opens a connector from its JSON configuration.
func openConn(cfgJSON []byte) (int64, error) {
	cfg, err := parseConfig(cfgJSON)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := connector.Open(ctx, cfg)
	if err != nil {
		return 0, err
	}
	h := newHandle()
	e := &conn{c: c, buffers: map[int64]struct{}{}}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	handleMu.Lock()
	conns[h] = e
	handleMu.Unlock()
	return h, nil
}

// useConn is the open connector h, counted as in use until done is called.
func useConn(h int64) (e *conn, done func(), err error) {
	handleMu.Lock()
	defer handleMu.Unlock()
	e, ok := conns[h]
	if !ok {
		// Handles are never reused: one not open was closed (or is bogus).
		return nil, nil, fmt.Errorf("libxfer: connector handle %d: closed (or never opened): %w", h, net.ErrClosed)
	}
	e.calls.Add(1)
	return e, e.calls.Done, nil
}

// closeConn closes a connector and forgets its buffers (their memory goes
// with the pool): it stops the connector, which fails the calls in flight,
// waits for them to return, then closes the engine. Closing a handle that
// is not open is not an error: close is idempotent.
func closeConn(h int64) error {
	handleMu.Lock()
	e, ok := conns[h]
	if ok {
		delete(conns, h) // no call starts on it from here on
		for b := range e.buffers {
			delete(buffers, b)
		}
	}
	handleMu.Unlock()
	if !ok {
		return nil
	}
	e.cancel()
	e.c.Stop()
	e.calls.Wait()
	return e.c.Close()
}

// stopConn stops a connector without unmapping its pool (Connector.Stop):
// for a caller that still has views of the pool, which closes it once
// they are gone. Its buffers stay live until then.
func stopConn(h int64) error {
	e, done, err := useConn(h)
	if err != nil {
		return nil // closed already: nothing to stop
	}
	defer done()
	e.cancel()
	e.c.Stop()
	return nil
}

// addBuffer records b as a handle of connector ch.
func addBuffer(ch int64, b *connector.Buffer) (int64, error) {
	handleMu.Lock()
	defer handleMu.Unlock()
	c, ok := conns[ch]
	if !ok {
		// Closed while the call ran: the memory is gone already.
		return 0, fmt.Errorf("libxfer: connector handle %d: closed during the call: %w", ch, errInvalid)
	}
	h := newHandle()
	buffers[h] = &buffer{conn: ch, b: b}
	c.buffers[h] = struct{}{}
	return h, nil
}

// useBuffer is the live buffer h, its connector counted as in use until
// done is called.
func useBuffer(h int64) (b *connector.Buffer, done func(), err error) {
	handleMu.Lock()
	defer handleMu.Unlock()
	e, ok := buffers[h]
	if !ok {
		return nil, nil, notLive(h)
	}
	c := conns[e.conn] // a live buffer's connector is open
	c.calls.Add(1)
	return e.b, c.calls.Done, nil
}

// takeBuffer forgets the handle and returns its buffer, its connector
// counted as in use until done is called.
func takeBuffer(h int64) (b *connector.Buffer, done func(), ok bool) {
	handleMu.Lock()
	defer handleMu.Unlock()
	e, ok := buffers[h]
	if !ok {
		return nil, nil, false
	}
	delete(buffers, h)
	c := conns[e.conn] // a live buffer's connector is open
	delete(c.buffers, h)
	c.calls.Add(1)
	return e.b, c.calls.Done, true
}

// releaseBuffer hands a buffer's memory back to its pool. Releasing a
// handle that is not live is not an error: release is idempotent.
func releaseBuffer(h int64) error {
	b, done, ok := takeBuffer(h)
	if !ok {
		return nil
	}
	defer done()
	return b.Release()
}

// useStage is useConn for a call on key from stage from to stage to (a
// put, a get, a cleanup): it also refuses the stage names and keys the
// connector would, as bad input.
func useStage(h int64, from, to, key string) (*conn, func(), error) {
	e, done, err := useConn(h)
	if err != nil {
		return nil, nil, err
	}
	if err := checkNames(from, to, key); err != nil {
		done()
		return nil, nil, err
	}
	return e, done, nil
}

// notLive is the error for a buffer handle h that is not in the table.
func notLive(h int64) error {
	return fmt.Errorf("libxfer: buffer handle %d: not live (released, published, or its connector closed): %w", h, connector.ErrReleased)
}

// checkNames refuses stage names and keys the connector would, as bad
// input.
func checkNames(from, to, key string) error {
	switch {
	case strings.Contains(from, "/") || strings.Contains(to, "/"):
		return fmt.Errorf("libxfer: stages %q and %q: a stage name may not contain '/': %w", from, to, errInvalid)
	case key == "":
		return fmt.Errorf("libxfer: empty key: %w", errInvalid)
	}
	return nil
}

// timeoutCtx is a context that ends with the connector e, bounded by ms
// milliseconds (none for ms <= 0).
func timeoutCtx(e *conn, ms int64) (context.Context, context.CancelFunc) {
	if ms <= 0 {
		return context.WithCancel(e.ctx)
	}
	return context.WithTimeout(e.ctx, time.Duration(ms)*time.Millisecond)
}

// putOptions are a put's options.
type putOptions struct {
	consumers int   // 0: the connector's default (one)
	retain    bool  // keep until cleanup
	ttlMS     int64 // 0: the connector's TTL; negative: never
}

func (o putOptions) list() []connector.PutOption {
	var opts []connector.PutOption
	if o.consumers > 0 {
		opts = append(opts, connector.Consumers(o.consumers))
	}
	if o.retain {
		opts = append(opts, connector.Retain())
	}
	if o.ttlMS != 0 {
		opts = append(opts, connector.WithTTL(time.Duration(o.ttlMS)*time.Millisecond))
	}
	return opts
}

// check refuses options no put takes.
func (o putOptions) check() error {
	if o.consumers < 0 {
		return fmt.Errorf("libxfer: consumers %d: must not be negative: %w", o.consumers, errInvalid)
	}
	return nil
}

// usePut is useStage for a put, whose options o it checks too.
func usePut(h int64, from, to, key string, o putOptions) (*conn, func(), error) {
	e, done, err := useStage(h, from, to, key)
	if err != nil {
		return nil, nil, err
	}
	if err := o.check(); err != nil {
		done()
		return nil, nil, err
	}
	return e, done, nil
}

// put stores a value: bytes, a tensor (dtype and shape), an object (data
// is its JSON) or a pickled object. data is copied into the pool.
func put(h int64, from, to, key string, kind int32, dtype string, shape []int64, data []byte, o putOptions, timeoutMS int64) (connector.Meta, error) {
	e, done, err := usePut(h, from, to, key, o)
	if err != nil {
		return connector.Meta{}, err
	}
	defer done()
	c := e.c
	var v any
	switch kind {
	case kindBytes:
		if data == nil {
			data = []byte{}
		}
		v = data
	case kindTensor:
		dt, err := connector.ParseDType(dtype)
		if err != nil {
			return connector.Meta{}, fmt.Errorf("%w: %w", err, errInvalid)
		}
		if data == nil {
			data = []byte{}
		}
		v = connector.Tensor{DType: dt, Shape: shape, Data: data}
	case kindObject:
		raw, err := objectFromJSON(data)
		if err != nil {
			return connector.Meta{}, err
		}
		v = cbor.RawMessage(raw)
	case kindPickle:
		raw, err := objectFromPickle(data)
		if err != nil {
			return connector.Meta{}, err
		}
		v = cbor.RawMessage(raw)
	default:
		return connector.Meta{}, fmt.Errorf("libxfer: kind %d: want 1 (bytes), 2 (tensor), 3 (object) or 4 (pickle): %w", kind, errInvalid)
	}
	ctx, cancel := timeoutCtx(e, timeoutMS)
	defer cancel()
	_, m, err := c.Put(ctx, from, to, key, v, o.list()...)
	return m, err
}

// alloc hands out pool memory for a value to fill in place: n bytes, or a
// tensor of dtype and shape (dtype non-empty).
func alloc(h int64, dtype string, shape []int64, n int64, timeoutMS int64) (int64, error) {
	e, done, err := useConn(h)
	if err != nil {
		return 0, err
	}
	defer done()
	c := e.c
	ctx, cancel := timeoutCtx(e, timeoutMS)
	defer cancel()
	var b *connector.Buffer
	if dtype != "" {
		dt, err := connector.ParseDType(dtype)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", err, errInvalid)
		}
		b, err = c.AllocTensor(ctx, dt, shape)
		if err != nil {
			return 0, err
		}
	} else {
		if n < 0 {
			return 0, fmt.Errorf("libxfer: alloc of %d bytes: %w", n, errInvalid)
		}
		if b, err = c.AllocBytes(ctx, n); err != nil {
			return 0, err
		}
	}
	bh, err := addBuffer(h, b)
	if err != nil {
		b.Release()
		return 0, err
	}
	return bh, nil
}

// putBuffer publishes an allocated buffer without a copy; the handle ends.
func putBuffer(h, bh int64, from, to, key string, o putOptions, timeoutMS int64) (connector.Meta, error) {
	e, done, err := usePut(h, from, to, key, o)
	if err != nil {
		return connector.Meta{}, err
	}
	defer done()
	c := e.c
	handleMu.Lock()
	be, ok := buffers[bh]
	handleMu.Unlock()
	if !ok {
		return connector.Meta{}, notLive(bh)
	}
	if be.conn != h {
		return connector.Meta{}, fmt.Errorf("libxfer: buffer handle %d belongs to connector %d, not %d: %w", bh, be.conn, h, errInvalid)
	}
	b, bdone, ok := takeBuffer(bh)
	if !ok {
		return connector.Meta{}, fmt.Errorf("libxfer: buffer handle %d: released during the call: %w", bh, connector.ErrReleased)
	}
	defer bdone()
	ctx, cancel := timeoutCtx(e, timeoutMS)
	defer cancel()
	_, m, err := c.PutBuffer(ctx, from, to, key, b, o.list()...)
	if err != nil {
		b.Release() // PutBuffer took it, or it is released here: no leak either way
	}
	return m, err
}

// get fetches a value into the pool and returns its buffer handle and
// metadata. metaJSON is the producer's metadata (JSON of connector.Meta),
// possibly partial, or empty for none.
func get(h int64, from, to, key string, metaJSON []byte, timeoutMS int64, noWait bool) (int64, connector.Meta, error) {
	e, done, err := useStage(h, from, to, key)
	if err != nil {
		return 0, connector.Meta{}, err
	}
	defer done()
	c := e.c
	var meta *connector.Meta
	if len(metaJSON) > 0 {
		m, err := parseMeta(metaJSON)
		if err != nil {
			return 0, connector.Meta{}, err
		}
		meta = &m
	}
	var opts []connector.GetOption
	if noWait {
		opts = append(opts, connector.NoWait())
	}
	ctx, cancel := timeoutCtx(e, timeoutMS)
	defer cancel()
	b, _, err := c.Get(ctx, from, to, key, meta, opts...)
	if err != nil {
		return 0, connector.Meta{}, err
	}
	bh, err := addBuffer(h, b)
	if err != nil {
		b.Release()
		return 0, connector.Meta{}, err
	}
	return bh, b.Meta(), nil
}

// maxMetaJSON bounds the JSON of a Meta.
const maxMetaJSON = 2*connector.MaxKeyLen + connector.MaxProducerLen + 4096

// parseMeta decodes a Meta from JSON: whole, or partial (a producer only).
func parseMeta(b []byte) (connector.Meta, error) {
	if len(b) > maxMetaJSON {
		return connector.Meta{}, fmt.Errorf("libxfer: metadata: %d bytes of JSON: at most %d: %w", len(b), maxMetaJSON, errInvalid)
	}
	var m connector.Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return connector.Meta{}, fmt.Errorf("libxfer: metadata: %v: %w", err, errInvalid)
	}
	if len(m.Producer) > connector.MaxProducerLen || len(m.Key) > connector.MaxKeyLen || len(m.Shape) > connector.MaxDims {
		return connector.Meta{}, fmt.Errorf("libxfer: metadata: a field out of range: %w", errInvalid)
	}
	if m.Kind != 0 {
		if err := m.Check(); err != nil {
			return connector.Meta{}, err
		}
	}
	return m, nil
}

// bufferData is the buffer's memory: its address in the pool and size.
func bufferData(bh int64) (unsafe.Pointer, int64, error) {
	b, done, err := useBuffer(bh)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	d := b.Bytes()
	if len(d) == 0 {
		return nil, 0, nil
	}
	return unsafe.Pointer(unsafe.SliceData(d)), int64(len(d)), nil
}

// bufferObject decodes the object a buffer holds (see objectToJSON).
func bufferObject(bh int64) ([]byte, bool, error) {
	b, done, err := useBuffer(bh)
	if err != nil {
		return nil, false, err
	}
	defer done()
	if b.Meta().Kind != connector.KindObject {
		return nil, false, fmt.Errorf("libxfer: the buffer holds %v, not an object: %w", b.Meta().Kind, errInvalid)
	}
	data, err := b.HostBytes()
	if err != nil {
		return nil, false, err
	}
	return objectToJSON(data)
}

// cleanup deletes a stored value; it reports whether there was one.
func cleanup(h int64, from, to, key string) (bool, error) {
	e, done, err := useStage(h, from, to, key)
	if err != nil {
		return false, err
	}
	defer done()
	return e.c.Cleanup(from, to, key)
}

// isStored reports whether a value is stored under the names now.
func isStored(h int64, from, to, key string) (bool, error) {
	e, done, err := useStage(h, from, to, key)
	if err != nil {
		return false, err
	}
	defer done()
	return e.c.Stored(from, to, key)
}

// health is the connector's Health as JSON, with the pool's address
// (pool_addr): the binding maps the whole pool as one array for code that
// addresses it by offset, as Mooncake's connector does.
func health(h int64) ([]byte, error) {
	e, done, err := useConn(h)
	if err != nil {
		return nil, err
	}
	defer done()
	c := e.c
	out := struct {
		connector.Health
		PoolAddr uint64 `json:"pool_addr,omitempty"`
	}{Health: c.Health()}
	if !out.Closed {
		out.PoolAddr = uint64(c.Engine().Pool().Region().Addr())
	}
	return json.Marshal(out)
}

// metaJSON is m as JSON.
func metaJSON(m connector.Meta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("libxfer: metadata: %w", err)
	}
	return b, nil
}
