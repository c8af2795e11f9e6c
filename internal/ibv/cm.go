package ibv

import (
	"strconv"
	"syscall"
)

// CMEventType is the kind of an rdma_cm event (enum rdma_cm_event_type).
type CMEventType int

// rdma_cm event types. The values are those of enum rdma_cm_event_type.
const (
	CMEventAddrResolved CMEventType = iota
	CMEventAddrError
	CMEventRouteResolved
	CMEventRouteError
	CMEventConnectRequest
	CMEventConnectResponse
	CMEventConnectError
	CMEventUnreachable
	CMEventRejected
	CMEventEstablished
	CMEventDisconnected
	CMEventDeviceRemoval
	CMEventMulticastJoin
	CMEventMulticastError
	CMEventAddrChange
	CMEventTimewaitExit
)

var cmEventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
	"DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE",
	"TIMEWAIT_EXIT",
}

// String names the event as rdma_event_str does.
func (t CMEventType) String() string {
	if t >= 0 && int(t) < len(cmEventNames) {
		return "RDMA_CM_EVENT_" + cmEventNames[t]
	}
	return "RDMA_CM_EVENT_" + strconv.Itoa(int(t))
}

// CMEvent is an rdma_cm event, copied out of librdmacm and acknowledged.
type CMEvent struct {
	Type CMEventType
	// ID is the CM ID the event is for. For CMEventConnectRequest it is a
	// new ID for the incoming connection, which the receiver owns: Accept
	// (or Reject) and eventually Close it.
	ID *CMID
	// Listen is the listening ID, for CMEventConnectRequest.
	Listen *CMID
	// Status is the event's status: a negative errno for the error events
	// (ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR, UNREACHABLE), the transport's
	// reject reason for REJECTED, else 0.
	Status int
	// PrivateData is the peer's private data of CONNECT_REQUEST, ESTABLISHED
	// (active side) and REJECTED. On InfiniBand and RoCE it is padded with
	// zeros to the size of the CM message; carry your own length in it.
	PrivateData []byte
}

// Err returns the event's status as an error: a syscall.Errno for a
// negative Status, nil for 0.
func (e *CMEvent) Err() error {
	switch {
	case e.Status < 0:
		return syscall.Errno(-e.Status)
	case e.Status > 0:
		return &sentinel{msg: e.Type.String() + " status " + strconv.Itoa(e.Status)}
	}
	return nil
}
