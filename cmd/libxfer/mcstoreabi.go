//go:build cgo

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"sync"
	"unsafe"
)

// The Mooncake store's exports (xfer_mcs_*), for
// python/xfer/mooncake/store.py. Each returns 0 (or a count or size) or a
// negative Mooncake store code (types.h's ErrorCode: -200 no space, -704
// not found, -706 leased, ...), and writes the error's message into
// err/errlen. Keys travel as one buffer of concatenated bytes and their
// lengths; a ReplicateConfig as a JSON object (empty for the default).

// scRet writes err's message and returns its store code.
func scRet(err error, buf *C.char, n C.size_t) C.int64_t {
	if err == nil {
		return 0
	}
	writeStr(err.Error(), buf, n)
	return C.int64_t(storeCode(err))
}

// storeCall runs f on the store h; f's result is returned when it did not fail.
func storeCall(h C.int64_t, op string, errBuf *C.char, errLen C.size_t, f func(s *mcStore) (int64, error)) (ret C.int64_t) {
	var err error
	var v int64
	defer func() {
		if err != nil {
			ret = scRet(err, errBuf, errLen)
		} else {
			ret = C.int64_t(v)
		}
	}()
	defer guard(op, &err)
	s, done, err := useStore(int64(h))
	if err != nil {
		return
	}
	defer done()
	v, err = f(s)
	return
}

// storeKeys reads n concatenated keys.
func storeKeys(buf *C.char, lens *C.int64_t, n C.int32_t) ([]string, error) {
	if n < 0 || n > maxBatch {
		return nil, serr(scInvalidParams, "a batch of %d keys: want 0 to %d", n, maxBatch)
	}
	if n == 0 {
		return nil, nil
	}
	if buf == nil || lens == nil {
		return nil, serr(scInvalidParams, "a batch of %d keys with a null array", n)
	}
	ls := unsafe.Slice((*int64)(unsafe.Pointer(lens)), int(n))
	var total int64
	for _, l := range ls {
		if l < 0 || l > storeMaxKey {
			return nil, serr(scInvalidKey, "a key of %d bytes: want 1 to %d", l, storeMaxKey)
		}
		total += l
	}
	all := C.GoStringN(buf, C.int(total))
	keys := make([]string, n)
	off := int64(0)
	for i, l := range ls {
		keys[i] = all[off : off+l]
		off += l
	}
	return keys, nil
}

// storeReplicate reads a put's ReplicateConfig (nil: the default).
func storeReplicate(p *C.char, n C.int64_t) (*replicateConfig, error) {
	if n <= 0 {
		return nil, nil
	}
	return parseReplicate([]byte(goStr(p, n)))
}

// xfer_mcs_setup sets a client up from a JSON object of setup's
// arguments; *handle names it.
//
//export xfer_mcs_setup
func xfer_mcs_setup(cfg *C.char, cfgLen C.int64_t, handle *C.int64_t, errBuf *C.char, errLen C.size_t) (ret C.int64_t) {
	var err error
	defer func() { ret = scRet(err, errBuf, errLen) }()
	defer guard("mooncake store setup", &err)
	var h int64
	if h, err = storeOpen([]byte(goStr(cfg, cfgLen))); err == nil {
		*handle = C.int64_t(h)
	}
	return
}

//export xfer_mcs_close
func xfer_mcs_close(h C.int64_t, errBuf *C.char, errLen C.size_t) (ret C.int64_t) {
	var err error
	defer func() { ret = scRet(err, errBuf, errLen) }()
	defer guard("mooncake store close", &err)
	err = storeClose(int64(h))
	return
}

// xfer_mcs_hostname writes the client's segment name (host:port).
//
//export xfer_mcs_hostname
func xfer_mcs_hostname(h C.int64_t, out *C.char, outLen C.size_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store hostname", errBuf, errLen, func(s *mcStore) (int64, error) {
		writeStr(s.hostname, out, outLen)
		return 0, nil
	})
}

//export xfer_mcs_register
func xfer_mcs_register(h C.int64_t, p unsafe.Pointer, n C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store register_buffer", errBuf, errLen, func(s *mcStore) (int64, error) {
		if err := s.m.register([]unsafe.Pointer{p}, []int64{int64(n)}, false); err != nil {
			return 0, serr(scInvalidParams, "register_buffer: %v", err)
		}
		return 0, nil
	})
}

//export xfer_mcs_unregister
func xfer_mcs_unregister(h C.int64_t, p unsafe.Pointer, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store unregister_buffer", errBuf, errLen, func(s *mcStore) (int64, error) {
		if err := s.m.unregister([]unsafe.Pointer{p}); err != nil {
			return 0, serr(scInvalidParams, "unregister_buffer: %v", err)
		}
		return 0, nil
	})
}

// xfer_mcs_put stores n bytes at p under key: copied through the local
// buffer with staged non-zero (any memory), else from a registered buffer
// (put_from); upsert non-zero replaces an existing value.
//
//export xfer_mcs_put
func xfer_mcs_put(h C.int64_t, key *C.char, keyLen C.int64_t, p unsafe.Pointer, n C.int64_t, cfg *C.char, cfgLen C.int64_t,
	staged, upsert C.int32_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store put", errBuf, errLen, func(s *mcStore) (int64, error) {
		rc, err := storeReplicate(cfg, cfgLen)
		if err != nil {
			return 0, err
		}
		return 0, s.put(goStr(key, keyLen), p, int64(n), rc, staged != 0, upsert != 0)
	})
}

// xfer_mcs_put_batch stores n values, each as xfer_mcs_put would; codes
// gets each one's code. It returns 0 unless the batch itself is refused.
//
//export xfer_mcs_put_batch
func xfer_mcs_put_batch(h C.int64_t, keys *C.char, keyLens *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t, n C.int32_t,
	cfg *C.char, cfgLen C.int64_t, staged, upsert C.int32_t, codes *C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store put_batch", errBuf, errLen, func(s *mcStore) (int64, error) {
		ks, err := storeKeys(keys, keyLens, n)
		if err != nil || len(ks) == 0 {
			return 0, err
		}
		if ptrs == nil || sizes == nil || codes == nil {
			return 0, serr(scInvalidParams, "put_batch with a null array")
		}
		rc, err := storeReplicate(cfg, cfgLen)
		if err != nil {
			return 0, err
		}
		ps := unsafe.Slice(ptrs, len(ks))
		ns := unsafe.Slice((*int64)(unsafe.Pointer(sizes)), len(ks))
		out := unsafe.Slice((*int64)(unsafe.Pointer(codes)), len(ks))
		s.batch(len(ks), func(i int) {
			out[i] = int64(storeCode(s.put(ks[i], ps[i], ns[i], rc, staged != 0, upsert != 0)))
		})
		return 0, nil
	})
}

// xfer_mcs_get reads key's value into the local buffer: *p and *n say
// where, and *token names it until xfer_mcs_release.
//
//export xfer_mcs_get
func xfer_mcs_get(h C.int64_t, key *C.char, keyLen C.int64_t, p *unsafe.Pointer, n *C.int64_t, token *C.int64_t,
	errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store get", errBuf, errLen, func(s *mcStore) (int64, error) {
		if p == nil || n == nil || token == nil {
			return 0, serr(scInvalidParams, "get with a null output")
		}
		ptr, size, tok, err := s.get(goStr(key, keyLen))
		if err != nil {
			return 0, err
		}
		*p, *n, *token = ptr, C.int64_t(size), C.int64_t(tok)
		return 0, nil
	})
}

//export xfer_mcs_release
func xfer_mcs_release(h C.int64_t, token C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store release", errBuf, errLen, func(s *mcStore) (int64, error) {
		if token == 0 {
			return 0, nil
		}
		return 0, s.release(int64(token))
	})
}

// xfer_mcs_get_into reads key's value into registered memory: its size.
//
//export xfer_mcs_get_into
func xfer_mcs_get_into(h C.int64_t, key *C.char, keyLen C.int64_t, p unsafe.Pointer, n C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store get_into", errBuf, errLen, func(s *mcStore) (int64, error) {
		return s.getInto(goStr(key, keyLen), p, int64(n))
	})
}

// xfer_mcs_get_into_batch reads n keys into registered memory; codes
// gets each one's size or code.
//
//export xfer_mcs_get_into_batch
func xfer_mcs_get_into_batch(h C.int64_t, keys *C.char, keyLens *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t, n C.int32_t,
	codes *C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store batch_get_into", errBuf, errLen, func(s *mcStore) (int64, error) {
		ks, err := storeKeys(keys, keyLens, n)
		if err != nil || len(ks) == 0 {
			return 0, err
		}
		if ptrs == nil || sizes == nil || codes == nil {
			return 0, serr(scInvalidParams, "batch_get_into with a null array")
		}
		ps := unsafe.Slice(ptrs, len(ks))
		ns := unsafe.Slice((*int64)(unsafe.Pointer(sizes)), len(ks))
		out := unsafe.Slice((*int64)(unsafe.Pointer(codes)), len(ks))
		s.batch(len(ks), func(i int) {
			v, err := s.getInto(ks[i], ps[i], ns[i])
			if err != nil {
				v = int64(storeCode(err))
			}
			out[i] = v
		})
		return 0, nil
	})
}

// xfer_mcs_get_ranges reads n ranges of key's value into registered
// memory; codes gets each range's byte count or code.
//
//export xfer_mcs_get_ranges
func xfer_mcs_get_ranges(h C.int64_t, key *C.char, keyLen C.int64_t, dsts *unsafe.Pointer, offs, lens *C.int64_t, n C.int32_t,
	codes *C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store get_into_ranges", errBuf, errLen, func(s *mcStore) (int64, error) {
		if n <= 0 || n > maxBatch || dsts == nil || offs == nil || lens == nil || codes == nil {
			return 0, serr(scInvalidParams, "get_into_ranges: %d ranges", n)
		}
		ds := unsafe.Slice(dsts, int(n))
		os := unsafe.Slice((*int64)(unsafe.Pointer(offs)), int(n))
		ls := unsafe.Slice((*int64)(unsafe.Pointer(lens)), int(n))
		rs := make([]readRange, n)
		for i := range rs {
			if os[i] < 0 || ls[i] < 0 {
				return 0, serr(scInvalidParams, "get_into_ranges: range %d: offset %d, length %d", i, os[i], ls[i])
			}
			rs[i] = readRange{dst: ds[i], off: uint64(os[i]), n: uint64(ls[i])}
		}
		s.getRanges(goStr(key, keyLen), rs, unsafe.Slice((*int64)(unsafe.Pointer(codes)), int(n)))
		return 0, nil
	})
}

//export xfer_mcs_size
func xfer_mcs_size(h C.int64_t, key *C.char, keyLen C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store get_size", errBuf, errLen, func(s *mcStore) (int64, error) {
		return s.size(goStr(key, keyLen))
	})
}

// xfer_mcs_exist writes 1, 0 or a code for each of n keys.
//
//export xfer_mcs_exist
func xfer_mcs_exist(h C.int64_t, keys *C.char, keyLens *C.int64_t, n C.int32_t, codes *C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store is_exist", errBuf, errLen, func(s *mcStore) (int64, error) {
		ks, err := storeKeys(keys, keyLens, n)
		if err != nil || len(ks) == 0 {
			return 0, err
		}
		if codes == nil {
			return 0, serr(scInvalidParams, "is_exist with a null array")
		}
		return 0, s.exist(ks, unsafe.Slice((*int64)(unsafe.Pointer(codes)), len(ks)))
	})
}

// xfer_mcs_remove removes n keys; codes gets each one's code.
//
//export xfer_mcs_remove
func xfer_mcs_remove(h C.int64_t, keys *C.char, keyLens *C.int64_t, n C.int32_t, force C.int32_t, codes *C.int64_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store remove", errBuf, errLen, func(s *mcStore) (int64, error) {
		ks, err := storeKeys(keys, keyLens, n)
		if err != nil || len(ks) == 0 {
			return 0, err
		}
		if codes == nil {
			return 0, serr(scInvalidParams, "remove with a null array")
		}
		return 0, s.remove(ks, force != 0, unsafe.Slice((*int64)(unsafe.Pointer(codes)), len(ks)))
	})
}

// xfer_mcs_remove_matching removes the keys matching an RE2 pattern, or
// every key with all non-zero: their count.
//
//export xfer_mcs_remove_matching
func xfer_mcs_remove_matching(h C.int64_t, pattern *C.char, patternLen C.int64_t, all, force C.int32_t, errBuf *C.char, errLen C.size_t) C.int64_t {
	return storeCall(h, "mooncake store remove_by_regex", errBuf, errLen, func(s *mcStore) (int64, error) {
		return s.removeMatching(goStr(pattern, patternLen), all != 0, force != 0)
	})
}

// storeBatchWidth is how many operations of a batch run at once.
const storeBatchWidth = 8

// batch runs f(0..n-1), storeBatchWidth at a time.
func (s *mcStore) batch(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	sem := make(chan struct{}, storeBatchWidth)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
