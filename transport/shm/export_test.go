package shm

import (
	"errors"
	"sync/atomic"

	"github.com/xferio/xfer/transport"
)

// UsesRing reports whether ep's messages take the message ring.
func UsesRing(ep transport.Endpoint) bool {
	e, ok := ep.(*Endpoint)
	return ok && e.msgs != nil
}

// CorruptRing publishes an entry of an unknown kind on ep's outbound
// ring, as a broken peer would.
func CorruptRing(ep transport.Endpoint) {
	m := ep.(*Endpoint).msgs
	m.wmu.Lock()
	room, at, ok, err := m.out.reserve(m.tail, 8)
	if err != nil || !ok {
		m.wmu.Unlock()
		panic("no room to corrupt the ring")
	}
	copy(room, "garbage!")
	m.tail = m.out.commit(m.tail, at, 9, 8)
	m.wmu.Unlock()
	m.ring()
}

// RingAsleep reports whether ep's ring reader sleeps on its doorbell.
func RingAsleep(ep transport.Endpoint) bool {
	m := ep.(*Endpoint).msgs
	return atomic.LoadUint32(m.in.u32(offSleep)) == 1
}

// Attached reports whether ep has the peer's region id mapped.
func Attached(ep transport.Endpoint, id uint32) bool {
	e := ep.(*Endpoint)
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.att[id]
	return a != nil && a.mem != nil
}

// DownAfterClose runs ep's OnDown and BeforeDown after ep closed, as a
// stream goroutine that noticed the peer's loss late would.
func DownAfterClose(ep transport.Endpoint) {
	m := ep.(*Endpoint).msgs
	m.beforeDown()
	m.goDown(errors.New("late"))
	m.ring()
}
