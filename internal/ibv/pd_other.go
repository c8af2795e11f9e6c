//go:build !cgo || !linux

package ibv

// PD is a protection domain; this build has none.
type PD struct{ _ [0]func() }

// AllocPD reports that this build cannot use verbs.
func (c *Context) AllocPD() (*PD, error) { return nil, errUnsupported("ibv_alloc_pd") }

// Context returns nil.
func (pd *PD) Context() *Context { return nil }

// Close does nothing.
func (pd *PD) Close() error { return nil }

// MR is a registered memory region; this build has none.
type MR struct {
	LKey uint32
	RKey uint32
	Addr uintptr
	Len  int
}

// RegMR reports that this build cannot use verbs.
func (pd *PD) RegMR(b []byte, access Access) (*MR, error) { return nil, errUnsupported("ibv_reg_mr") }

// RegDmabufMR reports that this build cannot use verbs.
func (pd *PD) RegDmabufMR(offset uint64, length int, iova uint64, fd int, access Access) (*MR, error) {
	return nil, errUnsupported("ibv_reg_dmabuf_mr")
}

// SGE returns the scatter/gather element for n bytes at offset off in the MR.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: uint64(mr.Addr) + uint64(off), Len: uint32(n), LKey: mr.LKey}
}

// Close does nothing.
func (mr *MR) Close() error { return nil }
