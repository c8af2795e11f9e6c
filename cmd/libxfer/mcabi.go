//go:build cgo

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/xferio/xfer"
)

// The Mooncake engine's exports (xfer_mc_*): Mooncake's TransferEngine
// for python/xfer/mooncake/engine.py. Each returns 0 or a negative
// Mooncake code (mcCode, from Mooncake's error.h), not a connector Code,
// and writes the error's message into err/errlen. Local addresses are
// pointers into the caller's memory; remote ones are addresses in the
// target process, as Mooncake's are.

// maxBatch bounds the transfers of one batch call.
const maxBatch = 1 << 20

// mcRet writes err's message into the caller's buffer and returns its
// Mooncake code.
func mcRet(err error, buf *C.char, n C.size_t) C.int32_t {
	if err == nil {
		return 0
	}
	writeStr(err.Error(), buf, n)
	return C.int32_t(mcCodeOf(err))
}

// mcCount checks a batch's length.
func mcCount(n C.int32_t) (int, error) {
	if n <= 0 || n > maxBatch {
		return 0, fmt.Errorf("mooncake: a batch of %d: want 1 to %d: %w", n, maxBatch, errInvalid)
	}
	return int(n), nil
}

// mcOpcode maps Mooncake's TransferOpcode (Read 0, Write 1).
func mcOpcode(op C.int32_t) (xfer.OpKind, error) {
	switch op {
	case 0:
		return xfer.OpRead, nil
	case 1:
		return xfer.OpWrite, nil
	}
	return 0, fmt.Errorf("mooncake: opcode %d: want Read (0) or Write (1): %w", op, errInvalid)
}

// mcXfers reads a batch's arrays.
func mcXfers(locals *unsafe.Pointer, remotes *C.uint64_t, lens *C.int64_t, n C.int32_t) ([]mcXfer, error) {
	k, err := mcCount(n)
	if err != nil {
		return nil, err
	}
	if locals == nil || remotes == nil || lens == nil {
		return nil, fmt.Errorf("mooncake: a batch of %d with a null array: %w", k, errInvalid)
	}
	ls := unsafe.Slice(locals, k)
	rs := unsafe.Slice((*uint64)(unsafe.Pointer(remotes)), k)
	ns := unsafe.Slice((*int64)(unsafe.Pointer(lens)), k)
	xs := make([]mcXfer, k)
	for i := range xs {
		xs[i] = mcXfer{local: ls[i], remote: rs[i], n: ns[i]}
	}
	return xs, nil
}

//export xfer_mc_open
func xfer_mc_open(host *C.char, hostLen C.int64_t, meta *C.char, metaLen C.int64_t, proto *C.char, protoLen C.int64_t,
	dev *C.char, devLen C.int64_t, handle *C.int64_t, port *C.int32_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = mcRet(err, errBuf, errLen) }()
	defer guard("mooncake open", &err)
	var h int64
	h, err = mcOpen(goStr(host, hostLen), goStr(meta, metaLen), goStr(proto, protoLen), goStr(dev, devLen))
	if err != nil {
		return
	}
	m, done, _ := useMC(h)
	*handle = C.int64_t(h)
	*port = C.int32_t(m.port)
	done()
	return
}

//export xfer_mc_close
func xfer_mc_close(h C.int64_t, errBuf *C.char, errLen C.size_t) (code C.int32_t) {
	var err error
	defer func() { code = mcRet(err, errBuf, errLen) }()
	defer guard("mooncake close", &err)
	err = mcClose(int64(h))
	return
}

// mcCall runs f on engine h as the ABI call op: a panic in f becomes an
// error, and the result is Mooncake's code for f's error (mcRet).
func mcCall(h C.int64_t, op string, errBuf *C.char, errLen C.size_t, f func(m *mcEngine) error) (code C.int32_t) {
	var err error
	defer func() { code = mcRet(err, errBuf, errLen) }()
	defer guard(op, &err)
	m, done, err := useMC(int64(h))
	if err != nil {
		return
	}
	defer done()
	err = f(m)
	return
}

// xfer_mc_register registers ranges of host memory, or with device
// non-zero of GPU memory (CUDA device addresses).
//
//export xfer_mc_register
func xfer_mc_register(h C.int64_t, addrs *unsafe.Pointer, lens *C.int64_t, n C.int32_t, device C.int32_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake register", errBuf, errLen, func(m *mcEngine) error {
		k, err := mcCount(n)
		if err != nil {
			return err
		}
		if addrs == nil || lens == nil {
			return fmt.Errorf("mooncake: register with a null array: %w", errInvalid)
		}
		return m.register(unsafe.Slice(addrs, k), unsafe.Slice((*int64)(unsafe.Pointer(lens)), k), device != 0)
	})
}

//export xfer_mc_unregister
func xfer_mc_unregister(h C.int64_t, addrs *unsafe.Pointer, n C.int32_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake unregister", errBuf, errLen, func(m *mcEngine) error {
		k, err := mcCount(n)
		if err != nil {
			return err
		}
		if addrs == nil {
			return fmt.Errorf("mooncake: unregister with a null array: %w", errInvalid)
		}
		return m.unregister(unsafe.Slice(addrs, k))
	})
}

//export xfer_mc_alloc
func xfer_mc_alloc(h C.int64_t, n C.int64_t, addr *C.uint64_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake alloc", errBuf, errLen, func(m *mcEngine) error {
		a, err := m.allocManaged(int64(n))
		if err == nil {
			*addr = C.uint64_t(a)
		}
		return err
	})
}

//export xfer_mc_free_managed
func xfer_mc_free_managed(h C.int64_t, addr unsafe.Pointer, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake free", errBuf, errLen, func(m *mcEngine) error { return m.freeManaged(addr) })
}

//export xfer_mc_copy
func xfer_mc_copy(h C.int64_t, addr unsafe.Pointer, buf unsafe.Pointer, n C.int64_t, in C.int32_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake copy", errBuf, errLen, func(m *mcEngine) error { return m.localCopy(addr, buf, int64(n), in != 0) })
}

//export xfer_mc_first_buffer
func xfer_mc_first_buffer(h C.int64_t, seg *C.char, segLen C.int64_t, addr *C.uint64_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake first buffer", errBuf, errLen, func(m *mcEngine) error {
		a, err := m.firstBuffer(goStr(seg, segLen))
		if err == nil {
			*addr = C.uint64_t(a)
		}
		return err
	})
}

// mcBatchArgs reads a batch call's opcode and arrays.
func mcBatchArgs(opcode C.int32_t, locals *unsafe.Pointer, remotes *C.uint64_t, lens *C.int64_t, n C.int32_t) (xfer.OpKind, []mcXfer, error) {
	kind, err := mcOpcode(opcode)
	if err != nil {
		return 0, nil, err
	}
	xs, err := mcXfers(locals, remotes, lens, n)
	return kind, xs, err
}

//export xfer_mc_submit
func xfer_mc_submit(h C.int64_t, seg *C.char, segLen C.int64_t, opcode C.int32_t, locals *unsafe.Pointer, remotes *C.uint64_t, lens *C.int64_t, n C.int32_t,
	batch *C.int64_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake submit", errBuf, errLen, func(m *mcEngine) error {
		kind, xs, err := mcBatchArgs(opcode, locals, remotes, lens, n)
		if err != nil {
			return err
		}
		id, err := m.submit(goStr(seg, segLen), kind, xs)
		if err == nil {
			*batch = C.int64_t(id)
		}
		return err
	})
}

// codesOut views the caller's per-transfer status array (nil for none).
func codesOut(codes *C.int32_t, n C.int32_t) []int32 {
	if codes == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(codes)), int(n))
}

//export xfer_mc_wait
func xfer_mc_wait(h C.int64_t, batch C.int64_t, codes *C.int32_t, ncodes C.int32_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake wait", errBuf, errLen, func(m *mcEngine) error { return m.wait(int64(batch), codesOut(codes, ncodes)) })
}

//export xfer_mc_check
func xfer_mc_check(h C.int64_t, batch C.int64_t, state *C.int32_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake check", errBuf, errLen, func(m *mcEngine) error {
		s, err := m.check(int64(batch))
		*state = C.int32_t(s)
		return err
	})
}

// xfer_mc_transfer moves a batch and waits for it. With notify non-zero,
// the target is then sent the notification (name, msg), as Mooncake's
// TransferNotify.
//
//export xfer_mc_transfer
func xfer_mc_transfer(h C.int64_t, seg *C.char, segLen C.int64_t, opcode C.int32_t, locals *unsafe.Pointer, remotes *C.uint64_t, lens *C.int64_t, n C.int32_t,
	notify C.int32_t, name *C.char, nameLen C.int64_t, msg *C.char, msgLen C.int64_t,
	codes *C.int32_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake transfer", errBuf, errLen, func(m *mcEngine) error {
		kind, xs, err := mcBatchArgs(opcode, locals, remotes, lens, n)
		if err != nil {
			return err
		}
		var nt *mcNotify
		if notify != 0 {
			if nameLen < 0 || msgLen < 0 {
				return fmt.Errorf("mooncake: a notify of negative length: %w", errInvalid)
			}
			nt = &mcNotify{Name: goStr(name, nameLen), Msg: goStr(msg, msgLen)}
		}
		return m.transferSync(goStr(seg, segLen), kind, xs, codesOut(codes, n), nt)
	})
}

// xfer_mc_notifies hands back the notifications received since the last
// call, oldest first, and forgets them: a JSON array of {"name", "msg"}
// in C memory (malloc'd; the caller frees it with xfer_free), with the
// number dropped because too many waited in *dropped.
//
//export xfer_mc_notifies
func xfer_mc_notifies(h C.int64_t, out **C.char, outLen *C.int64_t, dropped *C.int64_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake notifies", errBuf, errLen, func(m *mcEngine) error {
		if out == nil || outLen == nil || dropped == nil {
			return fmt.Errorf("mooncake: notifies: no place for the result: %w", errInvalid)
		}
		ns, d := m.inbox.take()
		if ns == nil {
			ns = []mcNotify{}
		}
		b, err := json.Marshal(ns)
		if err != nil {
			return err
		}
		p := C.malloc(C.size_t(len(b) + 1))
		if p == nil {
			for _, n := range ns {
				m.inbox.push(n) // taken back: nothing is lost
			}
			return fmt.Errorf("mooncake: notifies: malloc of %d bytes failed: %w", len(b)+1, errMemory)
		}
		dst := unsafe.Slice((*byte)(p), len(b)+1)
		copy(dst, b)
		dst[len(b)] = 0
		*out, *outLen, *dropped = (*C.char)(p), C.int64_t(len(b)), C.int64_t(d)
		return nil
	})
}

// xfer_mc_probe checks that a segment answers now (Mooncake's send_probe).
//
//export xfer_mc_probe
func xfer_mc_probe(h C.int64_t, seg *C.char, segLen C.int64_t, errBuf *C.char, errLen C.size_t) C.int32_t {
	return mcCall(h, "mooncake probe", errBuf, errLen, func(m *mcEngine) error { return m.probe(goStr(seg, segLen)) })
}
