package rdmacm

import "strconv"

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
