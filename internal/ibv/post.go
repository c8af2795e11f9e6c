package ibv

import "fmt"

// PostError reports a batch of work requests that the provider refused in
// part or whole. The WRs before Bad were posted and will complete; the
// others were not.
type PostError struct {
	Op     string // "ibv_post_send", "ibv_post_recv" or "ibv_post_srq_recv"
	Object string // "QP 0x11 on rxe0", "SRQ on rxe0"
	N      int    // WRs in the batch
	Posted int    // WRs posted
	Bad    int    // index of the refused WR (-1 if the provider did not say)
	BadID  uint64 // its ID
	Err    error  // the errno
}

func (e *PostError) Error() string {
	if e.Bad < 0 {
		return fmt.Sprintf("%s on %s: %d of %d WRs posted: %v", e.Op, e.Object, e.Posted, e.N, e.Err)
	}
	return fmt.Sprintf("%s on %s: WR %d (id %#x) of %d refused, %d posted: %v",
		e.Op, e.Object, e.Bad, e.BadID, e.N, e.Posted, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }
