package cuda

import (
	"errors"
	"slices"
	"sync"
)

// Contexts is a set of devices' primary contexts, each retained on first
// use, with idle streams to reuse per context: what a user of several
// GPUs over a long life (an engine, a transport) keeps. The zero value is
// ready; it is safe for concurrent use. Close releases everything; streams
// taken and not put back must be closed by whoever took them.
type Contexts struct {
	mu      sync.Mutex
	ctxs    map[int]*Context
	streams map[*Context][]*Stream
}

// Get returns device n's context, retaining it on first use.
func (s *Contexts) Get(n int) (*Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.ctxs[n]; c != nil {
		return c, nil
	}
	c, err := Retain(n)
	if err != nil {
		return nil, err
	}
	if s.ctxs == nil {
		s.ctxs = map[int]*Context{}
	}
	s.ctxs[n] = c
	return c, nil
}

// Devices lists the devices whose contexts the set holds, in order.
func (s *Contexts) Devices() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.ctxs))
	for n := range s.ctxs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Stream takes an idle stream of c, or makes one. Give it back with
// PutStream.
func (s *Contexts) Stream(c *Context) (*Stream, error) {
	s.mu.Lock()
	if ss := s.streams[c]; len(ss) > 0 {
		st := ss[len(ss)-1]
		s.streams[c] = ss[:len(ss)-1]
		s.mu.Unlock()
		return st, nil
	}
	s.mu.Unlock()
	return c.NewStream()
}

// PutStream gives back a stream of c that Stream returned, idle (its work
// synchronised).
func (s *Contexts) PutStream(c *Context, st *Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams == nil {
		s.streams = map[*Context][]*Stream{}
	}
	s.streams[c] = append(s.streams[c], st)
}

// Copy copies n bytes from src to dst, either or both GPU memory, on an
// idle stream of c, and waits for it.
func (s *Contexts) Copy(c *Context, dst, src uintptr, n int) error {
	st, err := s.Stream(c)
	if err != nil {
		return err
	}
	err = st.CopyAsync(dst, src, n)
	if err == nil {
		err = st.Sync()
	}
	s.PutStream(c, st)
	return err
}

// Close closes the idle streams and releases the contexts. The set is
// empty and usable again afterwards.
func (s *Contexts) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, ss := range s.streams {
		for _, st := range ss {
			errs = append(errs, st.Close())
		}
	}
	for _, c := range s.ctxs {
		errs = append(errs, c.Close())
	}
	s.streams, s.ctxs = nil, nil
	return errors.Join(errs...)
}
