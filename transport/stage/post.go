package stage

import (
	"fmt"
	"net"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Post runs op, whose local memory is on a device, over ep, which moves
// host memory only. It returns at once; op completes through op.Done.
//
// The operation goes in pieces of Piece bytes through the engine's
// pinned staging memory. For a WRITE each piece is copied from the GPU
// and posted while the next is copied, so the GPU's copies overlap the
// transport's; for a READ the pieces are read ahead and each is copied to
// the GPU as it lands. A write-with-notify posts its last piece with the
// notification once every other piece is in place, so the notification
// still follows all of its data.
//
// A staged operation cannot be cancelled (Endpoint.Cancel reports false
// for it): it ends when its pieces have.
func (s *Stager) Post(ep transport.Endpoint, op *transport.Op) {
	go func() {
		op.Err = s.run(ep, op)
		op.Done.OpDone(op)
	}()
}

// piece is one posted part of a staged operation.
type piece struct {
	t    transport.Op
	buf  mem.Buffer
	off  int
	done chan struct{}
}

func (p *piece) OpDone(*transport.Op) { p.done <- struct{}{} }

func (s *Stager) run(ep transport.Endpoint, op *transport.Op) (err error) {
	loc := op.Region.Location()
	pool, sreg, err := s.staging(loc)
	if err != nil {
		return fmt.Errorf("%s from %s: %w", op.Kind, loc, err)
	}
	if !sreg.Pin() {
		return fmt.Errorf("%s from %s: staging memory: %w", op.Kind, loc, net.ErrClosed)
	}
	defer sreg.Unpin()
	c, err := s.cfg.Devices.Get(loc)
	if err != nil {
		return fmt.Errorf("%s from %s: %w", op.Kind, loc, err)
	}
	st, err := c.Stream()
	if err != nil {
		return fmt.Errorf("%s from %s: %w", op.Kind, loc, err)
	}
	defer st.Release()

	dev, n := addrOf(op.Local), len(op.Local)
	read := op.Kind == transport.OpRead
	var inflight []*piece
	var first error
	// finish waits for the oldest piece and retires it: a READ's bytes
	// go to the GPU.
	finish := func() {
		p := inflight[0]
		inflight = inflight[1:]
		<-p.done
		if p.t.Err != nil && first == nil {
			first = p.t.Err
		}
		if read && first == nil {
			if err := st.CopyAsync(dev+uintptr(p.off), addrOf(p.t.Local), len(p.t.Local)); err == nil {
				err = st.Sync()
			} else if first == nil {
				first = err
			}
		}
		pool.Free(p.buf)
	}
	// One piece at least: an empty write-with-notify still notifies.
	for off := 0; first == nil; {
		m := min(Piece, n-off)
		b, aerr := pool.Alloc(max(m, 1))
		if aerr != nil {
			if len(inflight) > 0 {
				finish() // frees a piece: never wait holding one
				continue
			}
			if b, aerr = pool.AllocWait(s.cfg.Context, max(m, 1)); aerr != nil {
				first = fmt.Errorf("%s of %d bytes from %s: staging memory: %w", op.Kind, n, loc, aerr)
				break
			}
		}
		p := &piece{buf: b, off: off, done: make(chan struct{}, 1)}
		local := b.Bytes()[:m]
		if !read && m > 0 {
			if err := st.CopyAsync(addrOf(local), dev+uintptr(off), m); err == nil {
				err = st.Sync()
			}
			if err != nil {
				pool.Free(b)
				first = fmt.Errorf("%s of %d bytes from %s: %w", op.Kind, n, loc, err)
				break
			}
		}
		kind := op.Kind
		if kind == transport.OpWriteImm {
			if off+m < n {
				kind = transport.OpWrite
			} else {
				for len(inflight) > 0 && first == nil {
					finish()
				}
				if first != nil {
					pool.Free(b)
					break
				}
			}
		}
		p.t = transport.Op{Kind: kind, Local: local, Imm: op.Imm, Done: p, Region: sreg,
			Remote: transport.RemoteAddr{Region: op.Remote.Region, Addr: op.Remote.Addr + uint64(off), Key: op.Remote.Key}}
		ep.Post([]*transport.Op{&p.t}, false)
		inflight = append(inflight, p)
		off += m
		if off >= n {
			break
		}
	}
	for len(inflight) > 0 {
		finish()
	}
	return first
}
