package sys

import (
	"io"
	"net"
	"syscall"
	"testing"
)

// TCPMoved grows with the bytes a peer acknowledges and sends, on a real
// loopback connection.
func TestTCPMoved(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done, hold := make(chan error, 1), make(chan struct{})
	defer close(hold)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		b := make([]byte, 1000)
		if _, err := io.ReadFull(c, b); err != nil {
			done <- err
			return
		}
		_, err = c.Write(b[:300])
		done <- err
		<-hold // no FIN before the test measures
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	before, err := TCPMoved(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 300)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after, err := TCPMoved(rc)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 bytes acknowledged (the peer read them all before it answered)
	// and 300 received.
	if after-before != 1300 {
		t.Fatalf("moved %d bytes, want 1300", after-before)
	}
}
