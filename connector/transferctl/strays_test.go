package transferctl

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// strayKinds are the strays a test sends at the control port: one that
// connects and says nothing, one that dribbles the start of a message a
// byte at a time, one that sends random bytes, one that sends a
// well-formed message out of turn, one that sends a line longer than
// MaxLine, and one that closes at once (a port check).
var strayKinds = []testutil.Stray{
	testutil.StrayIdle,
	{Name: "trickle", Send: []byte(`{"type":"ready","pull":"write"`), Trickle: true},
	testutil.StrayGarbage,
	{Name: "out-of-turn", Send: []byte(`{"type":"got","seq":1,"md5_ok":true}` + "\n")},
	{Name: "long", Send: []byte(`{"type":"auth","nonce":"` + strings.Repeat("0", MaxLine+10) + "\"}\n")},
	testutil.StrayClose,
}

// stopper is a channel that closes once.
func stopper(t *testing.T) (<-chan struct{}, func()) {
	stop := make(chan struct{})
	var once sync.Once
	f := func() { once.Do(func() { close(stop) }) }
	t.Cleanup(f)
	return stop, f
}

// waitRefusals waits until refused lists n refusals of reason ("" for
// any), or fails the test.
func waitRefusals(t *testing.T, refused func() []refusedConn, reason string, n int) {
	t.Helper()
	var got []refusedConn
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got = refused()
		k := 0
		for _, r := range got {
			if reason == "" || r.reason == reason {
				k++
			}
		}
		if k >= n {
			return
		}
	}
	t.Fatalf("refusals %v: want %d of reason %q", got, n, reason)
}

// consume connects as the consumer, answers hello with ready, and returns
// the connection.
func consume(t *testing.T, addr, secret string, say func(string)) *Conn {
	t.Helper()
	c, hello, err := Connect(context.Background(), addr, 20*time.Second, secret, say)
	if err != nil {
		t.Fatal(err)
	}
	if hello.Transfers != testHello.Transfers || hello.Bytes != testHello.Bytes {
		c.Close()
		t.Fatalf("hello: %+v", hello)
	}
	if err := c.Send(Msg{Type: TypeReady, Pull: "read"}); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// converse checks that the producer p and the consumer c talk.
func converse(t *testing.T, p, c *Conn) {
	t.Helper()
	if err := p.Send(Msg{Type: TypePut, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(TypePut); err != nil || m.Seq != 1 {
		t.Fatalf("put: %+v %v", m, err)
	}
	if err := c.Send(Msg{Type: TypeGot, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if m, err := p.Recv(TypeGot); err != nil || m.Seq != 1 {
		t.Fatalf("got: %+v %v", m, err)
	}
}

// TestServeWaitsForItsConsumer: strays of every kind arrive before the
// consumer, while it connects and after it is served; the producer drops
// and reports each stray and serves the consumer, with a secret and
// without.
func TestServeWaitsForItsConsumer(t *testing.T) {
	eachSecret(t, func(t *testing.T, secret string) {
		addr := freeAddr(t)
		// The handshake bound is what idle strays wait out, and what the
		// consumer's own handshake must fit in while strays flood the
		// port: 300 ms was too short on a loaded 2-core host.
		served, refused := serveWith(t, ServeConfig{Addr: addr, Timeout: 20 * time.Second, HandshakeTimeout: time.Second, Secret: secret})
		dialRaw(t, addr).Close() // it listens
		stop, end := stopper(t)
		// Before: one of each kind, in place before the consumer dials;
		// the idle and trickling ones time out.
		var wg sync.WaitGroup
		for _, kind := range strayKinds {
			if !testutil.DialStray(addr, kind, stop, &wg) {
				t.Fatalf("a stray (%s) could not connect", kind.Name)
			}
		}
		waitRefusals(t, refused, "timeout", 2)
		// During: more while the consumer dials and authenticates.
		during := testutil.Flood(addr, strayKinds, 4*len(strayKinds), 4, stop)
		c := consume(t, addr, secret, nil)
		defer c.Close()
		p := servedConn(t, served)
		defer p.Close()
		// After: the port is the consumer's alone now; strays change
		// nothing.
		after := testutil.Flood(addr, strayKinds, len(strayKinds), len(strayKinds), stop)
		converse(t, p, c)
		if n := after(); n != 0 {
			t.Errorf("%d strays connected after the consumer was served", n)
		}
		converse(t, p, c)
		end()
		wg.Wait()
		during()
		reasons := map[string]int{}
		for _, r := range refused() {
			reasons[r.reason]++
		}
		if reasons["timeout"] == 0 || reasons["malformed"] == 0 || reasons["no_proof"] == 0 {
			t.Errorf("refusals by reason %v: want timeouts (idle, trickle), malformed (garbage, long) and no_proof (closed, out of turn)", reasons)
		}
	})
}

// TestServeSurvivesStrays: 500 strays, the consumer among them, from the
// same address, and the producer still serves it; the pending connections
// stay bounded: the oldest evicted once past its grace, newcomers refused
// (busy) while every pending one is in it.
func TestServeSurvivesStrays(t *testing.T) {
	eachSecret(t, func(t *testing.T, secret string) {
		addr := freeAddr(t)
		served, refused := serveWith(t, ServeConfig{Addr: addr, Timeout: 30 * time.Second, HandshakeTimeout: time.Second, Secret: secret})
		dialRaw(t, addr).Close() // it listens
		stop, end := stopper(t)
		const n = 500
		connected := testutil.Flood(addr, strayKinds, n, 16, stop)
		waitRefusals(t, refused, "", n/2)
		c := consume(t, addr, secret, nil)
		defer c.Close()
		p := servedConn(t, served)
		defer p.Close()
		converse(t, p, c)
		end()
		got := connected()
		reasons := map[string]int{}
		for _, r := range refused() {
			reasons[r.reason]++
		}
		if reasons[ReasonEvicted]+reasons[ReasonBusy] == 0 {
			t.Errorf("no stray evicted or refused for the bound among %d: refusals %v", got, reasons)
		}
		t.Logf("%d strays connected; refusals %v", got, reasons)
	})
}

// TestConnectRedials: a consumer that the producer drops before the
// handshake ended dials again until its timeout, and says so once.
func TestConnectRedials(t *testing.T) {
	eachSecret(t, func(t *testing.T, secret string) {
		addr := freeAddr(t)
		// A producer busy with others: it drops the first connections
		// at once, then the real one takes the port.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		var said []string
		var mu sync.Mutex
		say := func(s string) { mu.Lock(); said = append(said, s); mu.Unlock() }
		consumed := make(chan *Conn, 1)
		go func() {
			c, hello, err := Connect(context.Background(), addr, 20*time.Second, secret, say)
			if err != nil {
				t.Error(err)
				consumed <- nil
				return
			}
			if hello.Type != TypeHello {
				t.Errorf("hello: %+v", hello)
			}
			c.Send(Msg{Type: TypeReady})
			consumed <- c
		}()
		for range 2 {
			nc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			nc.Close()
		}
		ln.Close()
		served, _ := serve(t, addr, time.Second, secret)
		c := <-consumed
		if c == nil {
			return
		}
		defer c.Close()
		p := servedConn(t, served)
		defer p.Close()
		converse(t, p, c)
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(said); strings.Count(got, "dialing again") != 1 {
			t.Errorf("the consumer said %q: want it to say once that it dials again", said)
		}
	})
}
