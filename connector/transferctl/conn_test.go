package transferctl

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/connector"
)

// pair returns the two ends of a control channel over TCP on loopback:
// the producer's (accepted) and the consumer's (dialed).
func pair(t *testing.T, timeout time.Duration) (producer, consumer *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	type res struct {
		c   net.Conn
		err error
	}
	accepted := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- res{c, err}
	}()
	dc, err := Dial(ctx, ln.Addr().String(), 5*time.Second, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	a := <-accepted
	if a.err != nil {
		dc.Close()
		t.Fatal(a.err)
	}
	producer, consumer = NewConn(ctx, a.c, timeout, "consumer"), NewConn(ctx, dc, timeout, "producer")
	t.Cleanup(func() { producer.Close(); consumer.Close() })
	return producer, consumer
}

// TestConversation runs a run of two transfers as the tools do, and
// checks the bytes of what Go writes against the package documentation.
func TestConversation(t *testing.T) {
	p, c := pair(t, 5*time.Second)
	hello := Msg{Type: TypeHello, Transfers: 2, Bytes: 4 << 20, DType: "F32", Mode: "copy"}
	b, err := Encode(hello)
	if want := `{"type":"hello","transfers":2,"bytes":4194304,"dtype":"F32","mode":"copy"}` + "\n"; err != nil || string(b) != want {
		t.Fatalf("hello encodes as %q, %v; want %q", b, err, want)
	}
	if err := p.Send(hello); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(TypeHello); err != nil || m.Transfers != 2 || m.Bytes != 4<<20 || m.DType != "F32" || m.Mode != "copy" || m.Benchmark {
		t.Fatalf("hello received as %+v, %v", m, err)
	}
	if err := c.Send(Msg{Type: TypeReady, Pull: "write"}); err != nil {
		t.Fatal(err)
	}
	if m, err := p.Recv(TypeReady); err != nil || m.Pull != "write" {
		t.Fatalf("ready received as %+v, %v", m, err)
	}
	for seq := 1; seq <= 2; seq++ {
		meta := connector.Meta{Producer: "10.0.0.1:15500", Key: "producer/consumer/tensor", Size: 4 << 20, Kind: connector.KindTensor,
			DType: connector.F32, Shape: []int64{1 << 20}}
		if err := p.Send(Msg{Type: TypePut, Seq: seq, Meta: &meta, MD5: strings.Repeat("0f", 16), PutSeconds: 0.5}); err != nil {
			t.Fatal(err)
		}
		m, err := c.Recv(TypePut)
		if err != nil || m.Seq != seq || m.Meta == nil || m.Meta.Key != meta.Key || m.Meta.DType != connector.F32 || len(m.MD5) != 32 || m.PutSeconds != 0.5 {
			t.Fatalf("put %d received as %+v, %v", seq, m, err)
		}
		ok := seq == 1
		if err := c.Send(Msg{Type: TypeGot, Seq: seq, MD5OK: &ok, Seconds: 0.25, Transport: "tcp"}); err != nil {
			t.Fatal(err)
		}
		g, err := p.Recv(TypeGot)
		if err != nil || g.Seq != seq || g.MD5OK == nil || *g.MD5OK != ok || g.Seconds != 0.25 || g.Transport != "tcp" {
			t.Fatalf("got %d received as %+v, %v", seq, g, err)
		}
	}
}

// TestRecvErrors: each way a message can be wrong, or not come, is an
// error that says so; the other side's error message is a *PeerError.
func TestRecvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		send string // raw bytes from the producer; "" closes instead
		want string
	}{
		{"error message", `{"type":"error","error":"out of memory"}` + "\n", "the producer failed: out of memory"},
		{"wrong type", `{"type":"got"}` + "\n", `the producer sent a "got" message where a "put" was due`},
		{"malformed", "{\"type\":\n", "a malformed message from the producer"},
		{"too long", strings.Repeat(" ", MaxLine) + "{}\n", "longer than 65536 bytes"},
		{"closed", "", "the producer closed the connection"},
		{"silent", "-", `no "put" message from the producer within --timeout 200ms`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := pair(t, 200*time.Millisecond)
			switch tc.send {
			case "":
				p.Close()
			case "-":
			default:
				go p.conn.Write([]byte(tc.send))
			}
			_, err := c.Recv(TypePut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Recv: %v, want an error saying %q", err, tc.want)
			}
			var pe *PeerError
			if errors.As(err, &pe) != (tc.name == "error message") {
				t.Fatalf("Recv: %v (%T): a *PeerError exactly when the other side sent an error", err, err)
			}
		})
	}
}

// TestFail: Fail sends an error message for this side's errors, and none
// for the other side's own.
func TestFail(t *testing.T) {
	p, c := pair(t, 200*time.Millisecond)
	mine := errors.New("transfer 1: put: no room in the pool")
	if err := c.Fail(mine); err != mine {
		t.Fatalf("Fail returned %v, want its argument", err)
	}
	_, err := p.Recv(TypeGot)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != "consumer" || pe.Msg != mine.Error() {
		t.Fatalf("the other side received %v, want the consumer's error", err)
	}
	if err := p.Fail(err); err != pe {
		t.Fatalf("Fail of the peer's error returned %v", err)
	}
	if _, err := c.Recv(TypePut); err == nil || !strings.Contains(err.Error(), "within --timeout") {
		t.Fatalf("Fail sent the peer's own error back: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCancel: cancelling the context ends a blocked Recv at once.
func TestCancel(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c := NewConn(ctx, a, time.Minute, "producer")
	defer c.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	t0 := time.Now()
	if _, err := c.Recv(TypeHello); err == nil || time.Since(t0) > 10*time.Second {
		t.Fatalf("Recv after cancel: %v after %v", err, time.Since(t0))
	}
}

// TestEncodeLimits: a message that does not fit a line is refused by the
// writer, and Decode refuses a line that is too long.
func TestEncodeLimits(t *testing.T) {
	if _, err := Encode(Msg{Type: TypeError, Error: strings.Repeat("x", MaxLine)}); err == nil {
		t.Fatal("Encode wrote a message longer than MaxLine")
	}
	if _, err := Decode(append(bytes.Repeat([]byte(" "), MaxLine), "{}"...)); err == nil {
		t.Fatal("Decode read a line longer than MaxLine")
	}
	m, err := Decode([]byte(`{"type":"got","seq":3,"md5_ok":null,"future":[1,2]}`))
	if err != nil || m.Type != TypeGot || m.Seq != 3 || m.MD5OK != nil {
		t.Fatalf("a got with null md5_ok and an unknown member: %+v, %v", m, err)
	}
}

// FuzzDecode: the decoder never panics, and what it accepts encodes and
// decodes back to the same message.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"put","seq":1,"meta":{"producer":"10.0.0.1:15500","key":"a/b/k","size":4,"kind":2,"dtype":"F32","shape":[1]},"md5":"00"}`))
	f.Add([]byte(`{"type":"hello","transfers":3,"bytes":104857600,"dtype":"F32","mode":"copy","benchmark":true}`))
	f.Add([]byte(`{"type":"got","md5_ok":true,"seconds":0.5,"transport":"rdma"}`))
	f.Add([]byte(`{"type":"put","meta":{"dtype":"f99","shape":[-1]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := Decode(line)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "control channel: ") {
				t.Fatalf("an error that does not say where it comes from: %v", err)
			}
			return
		}
		b, err := Encode(m)
		if err != nil {
			return // a decoded meta that does not encode (an invalid dtype), or too long
		}
		back, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)) = %v", m, err)
		}
		b2, _ := Encode(back)
		if !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding changed the message: %q then %q", b, b2)
		}
	})
}

// FuzzRecv feeds the control channel's reader arbitrary lines: it returns
// a message of the wanted type or an error, never panics, and never waits
// past its timeout.
func FuzzRecv(f *testing.F) {
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
		cc := NewConn(context.Background(), a, time.Second, "producer")
		defer cc.Close()
		m, err := cc.Recv(TypePut)
		if err == nil && m.Type != TypePut {
			t.Fatalf("Recv(put) returned a %q message without an error", m.Type)
		}
		if err != nil && !strings.Contains(err.Error(), "control channel") && !strings.Contains(err.Error(), "failed") {
			t.Fatalf("an error that does not say where it comes from: %v", err)
		}
	})
}
