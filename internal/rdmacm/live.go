package rdmacm

import (
	"fmt"
	"sync/atomic"
)

// Counts is the number of live objects of each kind (see [Live]).
type Counts struct {
	Channels int // open Channels (removal watches' included)
	IDs      int
	Watches  int // removal watches (see WatchRemoval)
}

// IsZero reports whether no object is live.
func (c Counts) IsZero() bool { return c == Counts{} }

func (c Counts) String() string {
	return fmt.Sprintf("rdma_cm channels=%d ids=%d watches=%d", c.Channels, c.IDs, c.Watches)
}

var live struct {
	channels, ids, watches atomic.Int64
}

// Live returns how many objects of each kind are open: created and not yet
// closed. Tests check that it is zero when they end.
func Live() Counts {
	return Counts{
		Channels: int(live.channels.Load()),
		IDs:      int(live.ids.Load()),
		Watches:  int(live.watches.Load()),
	}
}
