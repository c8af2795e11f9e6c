package rdmacm

import (
	"fmt"
	"strconv"
	"syscall"
)

// EventType is the kind of an rdma_cm event (enum rdma_cm_event_type of
// <rdma/rdma_cma.h>; the kernel reports the same numbers).
type EventType int

// rdma_cm event types. The values are those of enum rdma_cm_event_type.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

var eventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
	"DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE",
	"TIMEWAIT_EXIT",
}

// String names the event as rdma_event_str does.
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return "RDMA_CM_EVENT_" + eventNames[t]
	}
	return "RDMA_CM_EVENT_" + strconv.Itoa(int(t))
}

// Event is an event of a [Channel].
type Event struct {
	Type EventType
	// ID is the ID the event is for. For EventConnectRequest it is a new
	// ID for the incoming connection, which the receiver owns: Accept (or
	// Reject) and eventually Close it.
	ID *ID
	// Status is the event's status: a negative errno for the error events,
	// the transport's reject reason for EventRejected, else 0.
	Status int
	// PrivateData is the peer's private data of a connection event. On
	// InfiniBand and RoCE it is padded with zeros to the size of the CM
	// message.
	PrivateData []byte
	// ResponderResources and InitiatorDepth are the peer's, for
	// EventConnectRequest.
	ResponderResources, InitiatorDepth int
}

// Err returns the event's status as an error: a syscall.Errno for a
// negative Status, nil for 0.
func (e *Event) Err() error {
	switch {
	case e.Status < 0:
		return syscall.Errno(-e.Status)
	case e.Status > 0:
		return fmt.Errorf("%v status %d", e.Type, e.Status)
	}
	return nil
}
