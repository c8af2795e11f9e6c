package verbs

import (
	"time"

	"github.com/xferio/xfer/internal/ibv"
)

// IgnoreRevokes makes endpoints keep stale rkeys (tests only).
func IgnoreRevokes(on bool) { testIgnoreRevokes.Store(on) }

// SetMaxMsgSize makes endpoints take n as the port's largest message (0:
// the port's own).
func SetMaxMsgSize(n uint32) { testMaxMsg.Store(n) }

// Attaches counts the attach round trips of every endpoint so far.
func Attaches() uint64 { return attaches.Load() }

// SetMaxCQs sets how many CQs a device may have and returns the old limit.
func SetMaxCQs(n int) int {
	old := maxCQsPerDevice
	maxCQsPerDevice = n
	return old
}

// CQSize is the size of the CQs the transport creates on device name (0 if
// it cannot be opened).
func CQSize(name string) int {
	d, err := openDevice(mustDefaults(Config{Device: name}))
	if err != nil {
		return 0
	}
	defer d.close()
	return d.cqSize()
}

// mustDefaults is cfg with its defaults, which must be valid.
func mustDefaults(cfg Config) Config {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		panic(err)
	}
	return cfg
}

// SyncPolled counts operations completed by their posting goroutine's own
// poll of the CQ.
func SyncPolled() uint64 { return syncPolled.Load() }

// RDMAPosts counts the ibv_post_send calls that posted WRITEs and READs.
func RDMAPosts() uint64 { return rdmaPosts.Load() }

func PollerSleeps() uint64 { return pollerSleeps.Load() }
func PollerNaps() uint64   { return pollerNaps.Load() }
func PollersAsleep() int   { return int(pollersAsleep.Load()) }

// DropListener makes the next rdma_cm acceptor close its listener before the
// dialer connects (on) or takes that back (off).
func DropListener(on bool) { testDropListener.Store(on) }

// SendSGE returns the max_send_sge of every QP of the transport's endpoints.
func SendSGE(t *Transport) []int {
	var out []int
	eachQP(t, func(qp *ibv.QP) { out = append(out, qp.Caps().MaxSendSGE) })
	return out
}

// opened is the device the transport opened (nil: none yet).
func opened(t *Transport) *device {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dev
}

// eachQP calls f with every QP of the transport's endpoints that are not
// released. It holds each endpoint's life lock, as the endpoint's own posts
// do: an endpoint whose path failed destroys its QPs meanwhile (move), and
// a QP must not be used once destroyed. The device's lock is not held
// then, since posters take it under the life lock.
func eachQP(t *Transport, f func(*ibv.QP)) {
	d := opened(t)
	if d == nil {
		return
	}
	d.mu.Lock()
	eps := make([]*Endpoint, 0, len(d.eps))
	for e := range d.eps {
		eps = append(eps, e)
	}
	d.mu.Unlock()
	for _, e := range eps {
		func() {
			e.life.RLock()
			defer e.life.RUnlock()
			if e.released {
				return
			}
			for _, q := range e.qps {
				f(q.qp)
			}
		}()
	}
}

// DeviceMaxSGE is the max_sge of the device the transport opened.
func DeviceMaxSGE(t *Transport) int {
	d, err := t.device()
	if err != nil {
		return 0
	}
	return d.info.MaxSGE
}

// RTRError is rtrError, for its test.
var RTRError = rtrError

// PathMTUs returns the path MTU of every QP of the transport's endpoints,
// as the device reports it (ibv_query_qp).
func PathMTUs(tb interface{ Fatal(...any) }, t *Transport) []int {
	var out []int
	eachQP(t, func(qp *ibv.QP) {
		m, err := qp.PathMTU()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, m)
	})
	return out
}

// ActiveMTU is the active MTU of the port the transport opened.
func ActiveMTU(t *Transport) int {
	d, err := t.device()
	if err != nil {
		return 0
	}
	return d.port.ActiveMTU
}

// ForgeGID makes the next dialer's QP info name another GID than its
// handshake did.
func ForgeGID() { testForgeGID.Store(true) }

// BreakQPs moves every QP of the transport's endpoints to the error state,
// as a NIC that fails under them would: their work requests flush.
func BreakQPs(t *Transport) { eachQP(t, func(qp *ibv.QP) { qp.ToError() }) }

// MarkGone marks the transport's device gone, as its removal does first,
// without telling its endpoints yet: what a post finds between the two.
func MarkGone(t *Transport, cause error) {
	d := opened(t)
	if d == nil {
		return
	}
	d.mu.Lock()
	d.gone, d.goneAt = cause, time.Now()
	d.mu.Unlock()
}

// CQRoom returns what cqRoom says of a peer that needs need entries on a
// device named name (no device is opened) that has maxCQsPerDevice CQs of
// size entries, used of each taken; and, when it says there is no room,
// what joinCQ says (it would take the room otherwise).
func CQRoom(name string, size, used, need int) (room, join error) {
	d := &device{info: ibv.DeviceInfo{Name: name}}
	for range maxCQsPerDevice {
		d.cqs = append(d.cqs, &cqGroup{size: size, reserved: used})
	}
	if room = d.cqRoom(need); room != nil {
		join = d.joinCQ(&Endpoint{cfg: mustDefaults(Config{})}, need)
	}
	return room, join
}
