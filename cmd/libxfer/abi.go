//go:build cgo

package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/xferio/xfer/connector"
)

// The exports. Each converts its arguments, calls the pure-Go function of
// the same name (handles.go), and reports the result through ret, which
// recovers from panics and writes the error's message into err/errlen.
// Strings come in as pointer and length (they need not be terminated);
// outputs go into caller buffers or C memory from malloc.

func main() {}

// ret writes err's message (truncated, NUL-terminated) into the caller's
// buffer and returns its code.
func ret(err error, buf *C.char, n C.size_t) C.int32_t {
	if err == nil {
		return 0
	}
	writeStr(err.Error(), buf, n)
	return C.int32_t(codeOf(err))
}

// writeStr copies s, truncated and NUL-terminated, into buf of n bytes.
func writeStr(s string, buf *C.char, n C.size_t) {
	if buf == nil || n == 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:len(dst)-1], s)
	dst[k] = 0
}

func goStr(p *C.char, n C.int64_t) string {
	if p == nil || n <= 0 {
		return ""
	}
	return C.GoStringN(p, C.int(n))
}

// goBytes views n bytes at p without copying (C memory, or the caller's
// array; never kept past the call).
func goBytes(p unsafe.Pointer, n C.int64_t) []byte {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

func goShape(p *C.int64_t, ndim C.int32_t) ([]int64, error) {
	if ndim < 0 || ndim > 32 {
		return nil, fmt.Errorf("libxfer: %d dimensions: want 0 to 32: %w", ndim, errInvalid)
	}
	if ndim == 0 {
		return []int64{}, nil
	}
	if p == nil {
		return nil, fmt.Errorf("libxfer: a shape of %d dimensions and no array: %w", ndim, errInvalid)
	}
	return append([]int64(nil), unsafe.Slice((*int64)(unsafe.Pointer(p)), int(ndim))...), nil
}

// writeOut copies b into the caller's buffer out of n bytes, NUL-terminated,
// and stores its length; a buffer too small is errBufferSize, with the
// length needed stored.
func writeOut(b []byte, out *C.char, n C.size_t, outLen *C.int64_t) error {
	if outLen != nil {
		*outLen = C.int64_t(len(b))
	}
	if out == nil || int(n) < len(b)+1 {
		return fmt.Errorf("libxfer: %d bytes to return, the buffer has %d: %w", len(b)+1, n, errBufferSize)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n))
	copy(dst, b)
	dst[len(b)] = 0
	return nil
}

// writeMeta writes m as JSON into the caller's buffer (see writeOut).
func writeMeta(m connector.Meta, out *C.char, n C.size_t, outLen *C.int64_t) error {
	b, err := metaJSON(m)
	if err != nil {
		return err
	}
	return writeOut(b, out, n, outLen)
}

//export xfer_abi_version
func xfer_abi_version() C.int32_t { return ABIVersion }

//export xfer_open
func xfer_open(cfg *C.char, cfgLen C.int64_t, handle *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("open", &err)
	var h int64
	h, err = openConn([]byte(goStr(cfg, cfgLen)))
	if err == nil && handle != nil {
		*handle = C.int64_t(h)
	}
	return
}

//export xfer_close
func xfer_close(h C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("close", &err)
	err = closeConn(int64(h))
	return
}

//export xfer_stop
func xfer_stop(h C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("stop", &err)
	err = stopConn(int64(h))
	return
}

//export xfer_put
func xfer_put(h C.int64_t, from *C.char, fromLen C.int64_t, to *C.char, toLen C.int64_t, key *C.char, keyLen C.int64_t,
	kind C.int32_t, dtype *C.char, dtypeLen C.int64_t, shape *C.int64_t, ndim C.int32_t,
	data unsafe.Pointer, size C.int64_t, consumers C.int32_t, retain C.int32_t, ttlMS C.int64_t, timeoutMS C.int64_t,
	metaOut *C.char, metaCap C.size_t, metaLen *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("put", &err)
	var sh []int64
	if kind == C.int32_t(kindTensor) {
		if sh, err = goShape(shape, ndim); err != nil {
			return
		}
	}
	if size < 0 || (size > 0 && data == nil) {
		err = fmt.Errorf("libxfer: put of %d bytes at %p: %w", size, data, errInvalid)
		return
	}
	m, err := put(int64(h), goStr(from, fromLen), goStr(to, toLen), goStr(key, keyLen), int32(kind), goStr(dtype, dtypeLen), sh,
		goBytes(data, size), putOptions{consumers: int(consumers), retain: retain != 0, ttlMS: int64(ttlMS)}, int64(timeoutMS))
	if err != nil {
		return
	}
	err = writeMeta(m, metaOut, metaCap, metaLen)
	return
}

//export xfer_alloc
func xfer_alloc(h C.int64_t, dtype *C.char, dtypeLen C.int64_t, shape *C.int64_t, ndim C.int32_t, size C.int64_t, timeoutMS C.int64_t,
	buf *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("alloc", &err)
	dt := goStr(dtype, dtypeLen)
	var sh []int64
	if dt != "" {
		if sh, err = goShape(shape, ndim); err != nil {
			return
		}
	}
	bh, err := alloc(int64(h), dt, sh, int64(size), int64(timeoutMS))
	if err == nil && buf != nil {
		*buf = C.int64_t(bh)
	}
	return
}

//export xfer_put_buffer
func xfer_put_buffer(h C.int64_t, buf C.int64_t, from *C.char, fromLen C.int64_t, to *C.char, toLen C.int64_t, key *C.char, keyLen C.int64_t,
	consumers C.int32_t, retain C.int32_t, ttlMS C.int64_t, timeoutMS C.int64_t,
	metaOut *C.char, metaCap C.size_t, metaLen *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("put_buffer", &err)
	m, err := putBuffer(int64(h), int64(buf), goStr(from, fromLen), goStr(to, toLen), goStr(key, keyLen),
		putOptions{consumers: int(consumers), retain: retain != 0, ttlMS: int64(ttlMS)}, int64(timeoutMS))
	if err != nil {
		return
	}
	err = writeMeta(m, metaOut, metaCap, metaLen)
	return
}

//export xfer_get
func xfer_get(h C.int64_t, from *C.char, fromLen C.int64_t, to *C.char, toLen C.int64_t, key *C.char, keyLen C.int64_t,
	meta *C.char, metaInLen C.int64_t, timeoutMS C.int64_t, noWait C.int32_t,
	buf *C.int64_t, metaOut *C.char, metaCap C.size_t, metaLen *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("get", &err)
	bh, m, err := get(int64(h), goStr(from, fromLen), goStr(to, toLen), goStr(key, keyLen), []byte(goStr(meta, metaInLen)), int64(timeoutMS), noWait != 0)
	if err != nil {
		return
	}
	if err = writeMeta(m, metaOut, metaCap, metaLen); err != nil {
		releaseBuffer(bh)
		return
	}
	if buf != nil {
		*buf = C.int64_t(bh)
	}
	return
}

//export xfer_buffer_data
func xfer_buffer_data(buf C.int64_t, data *unsafe.Pointer, size *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("buffer_data", &err)
	p, n, err := bufferData(int64(buf))
	if err != nil {
		return
	}
	if data != nil {
		*data = p
	}
	if size != nil {
		*size = C.int64_t(n)
	}
	return
}

//export xfer_buffer_object
func xfer_buffer_object(buf C.int64_t, out **C.char, outLen *C.int64_t, pickled *C.int32_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("buffer_object", &err)
	b, pk, err := bufferObject(int64(buf))
	if err != nil {
		return
	}
	if out == nil || outLen == nil {
		err = fmt.Errorf("libxfer: buffer_object: no place for the result: %w", errInvalid)
		return
	}
	p := C.malloc(C.size_t(len(b) + 1))
	if p == nil {
		err = fmt.Errorf("libxfer: malloc of %d bytes failed", len(b)+1)
		return
	}
	dst := unsafe.Slice((*byte)(p), len(b)+1)
	copy(dst, b)
	dst[len(b)] = 0
	*out, *outLen = (*C.char)(p), C.int64_t(len(b))
	if pickled != nil {
		*pickled = 0
		if pk {
			*pickled = 1
		}
	}
	return
}

//export xfer_buffer_release
func xfer_buffer_release(buf C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("buffer_release", &err)
	err = releaseBuffer(int64(buf))
	return
}

//export xfer_cleanup
func xfer_cleanup(h C.int64_t, from *C.char, fromLen C.int64_t, to *C.char, toLen C.int64_t, key *C.char, keyLen C.int64_t,
	existed *C.int32_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("cleanup", &err)
	ok, err := cleanup(int64(h), goStr(from, fromLen), goStr(to, toLen), goStr(key, keyLen))
	if err == nil && existed != nil {
		*existed = 0
		if ok {
			*existed = 1
		}
	}
	return
}

//export xfer_stored
func xfer_stored(h C.int64_t, from *C.char, fromLen C.int64_t, to *C.char, toLen C.int64_t, key *C.char, keyLen C.int64_t,
	stored *C.int32_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("stored", &err)
	ok, err := isStored(int64(h), goStr(from, fromLen), goStr(to, toLen), goStr(key, keyLen))
	if err == nil && stored != nil {
		*stored = 0
		if ok {
			*stored = 1
		}
	}
	return
}

//export xfer_health
func xfer_health(h C.int64_t, out *C.char, outCap C.size_t, outLen *C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = ret(err, errBuf, errLen) }()
	defer guard("health", &err)
	b, err := health(int64(h))
	if err == nil {
		err = writeOut(b, out, outCap, outLen)
	}
	return
}

//export xfer_free
func xfer_free(p unsafe.Pointer) { C.free(p) }
