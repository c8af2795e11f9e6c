package main

import (
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// The text status shows a peer's paused transport, and a move back to it
// apart from the operations repeated on a new connection.
func TestPrintStatusFailback(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := baseStatus()
	d.Engines = []xfer.Status{{
		ID: "e1", Policy: xfer.PolicyAuto,
		Peers: []xfer.PeerStatus{{Addr: "10.0.0.2:7471", Transport: "shm", Connected: true,
			Paused: []xfer.PausedTransport{{Transport: "rdma", Reason: "rdma device rxe0 removed", Since: at, NextProbe: at.Add(4 * time.Second), Probes: 2}}}},
		Failovers: 2,
		RecentFailovers: []xfer.FailoverEvent{
			{Time: at, Peer: "10.0.0.2:7471", From: "rdma", To: "shm", Op: "write", Attempts: 2, Reason: "connection_lost"},
			{Time: at, Peer: "10.0.0.2:7471", From: "shm", To: "rdma", Attempts: 3, Reason: "recovered"},
		},
	}}
	var b strings.Builder
	printStatus(&b, d)
	out := b.String()
	for _, want := range []string{
		"10.0.0.2:7471: rdma paused since 2026-01-02T03:04:05Z (rdma device rxe0 removed), next probe 2026-01-02T03:04:09Z, 2 failed",
		"write lost on rdma, done on shm after 2 attempts",
		"back from shm to rdma after 3 probes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the status does not say %q:\n%s", want, out)
		}
	}
}
