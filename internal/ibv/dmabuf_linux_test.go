//go:build cgo

package ibv

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/xferio/xfer/internal/sys"
)

// TestRegDmabufMR registers a DMA-BUF (a udmabuf of host memory: what a GPU
// driver's DMA-BUF of its memory looks like to the NIC) with
// ibv_reg_dmabuf_mr, and moves bytes into and out of it with RDMA WRITE
// and READ. A device that cannot map DMA-BUFs must say so with an error
// that wraps ErrNotSupported and names the call and the device; the test
// logs which it found.
func TestRegDmabufMR(t *testing.T) {
	p := newPair(t, pairOpts{})
	fd, m, err := sys.Udmabuf("xfer-dmabuf-test", bufSize)
	if err != nil {
		if errors.Is(err, sys.ErrNotSupported) {
			t.Skipf("no DMA-BUF to register: %v", err)
		}
		t.Fatal(err)
	}
	defer sys.Close(fd)
	defer sys.Munmap(m)
	iova := uint64(uintptr(unsafe.Pointer(&m[0])))
	mr, err := p.pd.RegDmabufMR(0, len(m), iova, fd, allAccess)
	if err != nil {
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "ibv_reg_dmabuf_mr") || !strings.Contains(err.Error(), p.info.Name) {
			t.Fatalf("ibv_reg_dmabuf_mr: %v: want an error that wraps ErrNotSupported and names the call and the device", err)
		}
		t.Logf("finding: %s does not register DMA-BUF memory: %v", p.info.Name, err)
		return
	}
	defer func() {
		if err := mr.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("finding: %s registers DMA-BUF memory (lkey %#x, rkey %#x)", p.info.Name, mr.LKey, mr.RKey)
	fill(p.bufA[:64<<10], 7)
	postSend(t, p.a, SendWR{ID: 0x900, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64<<10),
		RemoteAddr: uint64(mr.Addr) + 4096, RKey: mr.RKey})
	waitWC(t, p.cqA, 0x900, true)
	if !bytes.Equal(m[4096:4096+64<<10], p.bufA[:64<<10]) {
		t.Error("RDMA WRITE into the DMA-BUF MR: the memfd does not hold the data")
	}
	fill(m[128<<10:192<<10], 9)
	postSend(t, p.a, SendWR{ID: 0x901, Op: OpRead, Flags: FlagSignaled, SGE: p.mrA.SGE(256<<10, 64<<10),
		RemoteAddr: uint64(mr.Addr) + 128<<10, RKey: mr.RKey})
	waitWC(t, p.cqA, 0x901, true)
	if !bytes.Equal(p.bufA[256<<10:320<<10], m[128<<10:192<<10]) {
		t.Error("RDMA READ from the DMA-BUF MR: data differs")
	}
}
