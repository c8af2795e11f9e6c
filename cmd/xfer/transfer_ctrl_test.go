package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzCtrlRecv feeds the control channel's decoder arbitrary lines: it
// returns a message of the wanted type or an error, never panics, and
// never waits past its timeout.
func FuzzCtrlRecv(f *testing.F) {
	f.Add([]byte(`{"type":"put","seq":1,"meta":{"producer":"10.0.0.1:15500","key":"a/b/k","size":4,"kind":2,"dtype":"f32","shape":[1]},"md5":"00"}`))
	f.Add([]byte(`{"type":"error","error":"gone"}`))
	f.Add([]byte(`{"type":"got","md5_ok":true,"seconds":0.5}`))
	f.Add([]byte(`{"type":"put","meta":{"dtype":"f99","shape":[-1]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() {
			b.Write(append(line, '\n'))
		}()
		cc := newCtrlConn(context.Background(), a, time.Second, "producer")
		defer cc.Close()
		m, err := cc.recv("put")
		if err == nil && m.Type != "put" {
			t.Fatalf("recv(put) returned a %q message without an error", m.Type)
		}
		if err != nil && !strings.Contains(err.Error(), "control channel") && !strings.Contains(err.Error(), "failed") {
			t.Fatalf("an error that does not say where it comes from: %v", err)
		}
	})
}
