package xfer_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/xfertest"
)

// Calls are pooled and shared by every peer of the process. A shm WRITE
// completes inside its post, before its caller waits, and a tcp WRITE
// completes later, on the connection's read loop, while its caller waits.
// Interleaving the two on one pool checks that neither kind leaves its
// call in a state that lets the next user return before its operation is
// done: every tcp WRITE's bytes must be in place when Write returns, and
// so must the shm WRITE's, and a call whose context ended under it must
// not disturb the calls after it.
func TestCallReuseAcrossTransports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shm := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicySHM}, "")
	tcp := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyTCP}, "")
	shmDesc, _ := shm.Peer.Region("target")
	tcpDesc, _ := tcp.Peer.Region("target")
	sbuf, err := shm.Client.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	tbuf, err := tcp.Client.Alloc(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		for j := range sbuf.Bytes() {
			sbuf.Bytes()[j] = byte(i + j)
		}
		at := uint64(i%16) * 64
		for k := range 3 {
			if err := shm.Peer.Write(ctx, sbuf.Bytes(), shmDesc.At(at)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(shm.Target.Bytes()[at:at+64], sbuf.Bytes()) {
				t.Fatalf("shm write %d.%d was not in place when Write returned", i, k)
			}
		}
		if i%50 == 7 {
			// A call whose context has ended already: it fails or
			// completes, and leaves no trace for the next call.
			done, stop := context.WithCancel(ctx)
			stop()
			_ = tcp.Peer.Write(done, tbuf.Bytes()[:64], tcpDesc.At(3<<20))
		}
		for j := range tbuf.Bytes() {
			tbuf.Bytes()[j] = byte(i*7 + j)
		}
		if err := tcp.Peer.Write(ctx, tbuf.Bytes(), tcpDesc.At(0)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tcp.Target.Bytes()[:len(tbuf.Bytes())], tbuf.Bytes()) {
			t.Fatalf("tcp write %d was not in place when Write returned", i)
		}
	}
}
