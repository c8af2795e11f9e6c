package ibv

import (
	"fmt"
	"sync/atomic"
)

// Counts is the number of live objects of each kind (see [Live]).
type Counts struct {
	Contexts int // opened with Open
	PDs      int
	MRs      int
	MWs      int // memory windows
	CQs      int
	QPs      int
	SRQs     int
	Channels int // completion channels
}

// IsZero reports whether no object is live.
func (c Counts) IsZero() bool { return c == Counts{} }

func (c Counts) String() string {
	return fmt.Sprintf("contexts=%d pds=%d mrs=%d mws=%d cqs=%d qps=%d srqs=%d channels=%d",
		c.Contexts, c.PDs, c.MRs, c.MWs, c.CQs, c.QPs, c.SRQs, c.Channels)
}

var live struct {
	contexts, pds, mrs, mws, cqs, qps, srqs, channels atomic.Int64
}

// Live returns how many objects of each kind are open: created and not yet
// closed. Tests check that it is zero when they end.
func Live() Counts {
	return Counts{
		Contexts: int(live.contexts.Load()),
		PDs:      int(live.pds.Load()),
		MRs:      int(live.mrs.Load()),
		MWs:      int(live.mws.Load()),
		CQs:      int(live.cqs.Load()),
		QPs:      int(live.qps.Load()),
		SRQs:     int(live.srqs.Load()),
		Channels: int(live.channels.Load()),
	}
}
