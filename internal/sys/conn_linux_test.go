package sys

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func rawConn(t *testing.T, c syscall.Conn) syscall.RawConn {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestWriterReader(t *testing.T) {
	a, b := tcpPair(t)
	w := NewWriter(rawConn(t, a))
	r := NewReader(rawConn(t, b), 0)

	// Read waits in the poller until data arrives.
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		got <- result{buf[:n], err}
	}()
	time.Sleep(20 * time.Millisecond)
	if n, err := w.TryWritev(nil, []byte{}); n != 0 || err != nil {
		t.Fatalf("TryWritev of nothing: %d, %v", n, err)
	}
	n, err := w.TryWritev([]byte("head"), nil, []byte("er+"), []byte("payload"))
	if err != nil || n != 14 {
		t.Fatalf("TryWritev: %d, %v", n, err)
	}
	var all []byte
	select {
	case res := <-got:
		if res.err != nil {
			t.Fatal(res.err)
		}
		all = res.b
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return")
	}
	for len(all) < 14 {
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, buf[:n]...)
	}
	if string(all) != "header+payload" {
		t.Fatalf("read %q", all)
	}

	if n, err := w.TryWrite([]byte("x")); err != nil || n != 1 {
		t.Fatalf("TryWrite: %d, %v", n, err)
	}
	buf := make([]byte, 8)
	if n, err := r.Read(buf); err != nil || n != 1 || buf[0] != 'x' {
		t.Fatalf("Read: %d, %v", n, err)
	}

	// The end of the stream is io.EOF.
	a.CloseWrite()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read at end: %d, %v", n, err)
	}
}

func TestWriterFull(t *testing.T) {
	a, _ := tcpPair(t)
	a.SetWriteBuffer(64 << 10)
	w := NewWriter(rawConn(t, a))
	chunk := bytes.Repeat([]byte{1}, 1<<20)
	total := 0
	for i := 0; ; i++ {
		n, err := w.TryWritev([]byte("h"), chunk)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break // the socket is full: no error, nothing written, no wait
		}
		total += n
		if i > 1000 {
			t.Fatalf("socket never filled (%d bytes)", total)
		}
	}
	if total == 0 {
		t.Fatal("nothing written before the socket filled")
	}
}

func TestReaderClosed(t *testing.T) {
	_, b := tcpPair(t)
	r := NewReader(rawConn(t, b), 0)
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read on a closed connection: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return after Close")
	}
}

// A spinning reader takes data that comes within its spin without waiting
// in the poller; one whose spin ends waits there and still gets the data;
// a reader without spin never spins. No spinner is left behind.
func TestReaderSpin(t *testing.T) {
	a, b := tcpPair(t)
	cases := []struct {
		name  string
		spin  time.Duration
		delay time.Duration
		hit   bool
	}{
		{"within the spin", 10 * time.Second, 20 * time.Millisecond, true},
		{"after the spin", time.Millisecond, 200 * time.Millisecond, false},
		{"no spin", 0, 20 * time.Millisecond, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(rawConn(t, b), c.spin)
			before := SpinHits()
			go func() {
				time.Sleep(c.delay)
				a.Write([]byte{byte(i)})
			}()
			buf := make([]byte, 16)
			n, err := r.Read(buf)
			if err != nil || n != 1 || buf[0] != byte(i) {
				t.Fatalf("Read = %d, %v (byte %d), want 1 byte %d", n, err, buf[0], i)
			}
			if hit := SpinHits() > before; hit != c.hit {
				t.Errorf("the read was taken while spinning: %v, want %v", hit, c.hit)
			}
			if n, w := spinners.Load(), waiters.recent(epoch()); n != 0 || w != 0 {
				t.Errorf("%d spinners and %d waiters left", n, w)
			}
		})
	}
}

// At most maxSpinners readers spin at once, and none while more than that
// many readers wait for data: then they all wait in the poller, and the
// data that comes is not taken by a spin.
func TestReaderSpinnersBounded(t *testing.T) {
	defer func(w time.Duration) { spinWindow = w }(spinWindow)
	spinWindow = time.Hour // every waiter counts
	readers := int(maxSpinners) + 1
	var ws []*net.TCPConn
	done := make(chan error, readers)
	start := func() {
		a, b := tcpPair(t)
		r := NewReader(rawConn(t, b), 10*time.Second)
		ws = append(ws, a)
		go func() {
			_, err := r.Read(make([]byte, 1))
			done <- err
		}()
	}
	for range maxSpinners {
		start()
	}
	time.Sleep(100 * time.Millisecond)
	if n := spinners.Load(); n < 1 || n > maxSpinners {
		t.Errorf("%d readers spinning, want 1 to %d", n, maxSpinners)
	}
	start() // one waiter more than may spin: the spinners stop
	time.Sleep(100 * time.Millisecond)
	if n := spinners.Load(); n != 0 {
		t.Errorf("%d readers spinning with %d waiting, want 0", n, readers)
	}
	hits := SpinHits()
	for _, w := range ws {
		w.Write([]byte{1})
	}
	for range readers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := SpinHits() - hits; n != 0 {
		t.Errorf("%d reads taken while spinning, want 0", n)
	}
	if n, w := spinners.Load(), waiters.recent(epoch()); n != 0 || w != 0 {
		t.Errorf("%d spinners and %d waiters left", n, w)
	}
}

// Readers that have waited for longer than spinWindow (idle connections)
// do not stop another reader's spin.
func TestReaderSpinIgnoresIdleWaiters(t *testing.T) {
	var ws []*net.TCPConn
	done := make(chan error, maxSpinners+1)
	start := func(spin time.Duration) {
		a, b := tcpPair(t)
		r := NewReader(rawConn(t, b), spin)
		ws = append(ws, a)
		go func() {
			_, err := r.Read(make([]byte, 1))
			done <- err
		}()
	}
	for range maxSpinners {
		start(time.Millisecond) // spin briefly, then wait in the poller
	}
	time.Sleep(10*spinWindow + 50*time.Millisecond)
	if n := spinners.Load(); n != 0 {
		t.Fatalf("%d readers still spinning", n)
	}
	start(10 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if n := spinners.Load(); n != 1 {
		t.Errorf("%d readers spinning beside %d idle ones, want 1", n, maxSpinners)
	}
	hits := SpinHits()
	ws[len(ws)-1].Write([]byte{1})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if SpinHits() == hits {
		t.Error("the read was not taken while spinning")
	}
	for _, w := range ws[:len(ws)-1] {
		w.Write([]byte{1})
	}
	for range maxSpinners {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSendFile: a header sent with SendMore and a memfd's bytes sent with
// SendFile arrive whole and in order, also when the socket fills on the way
// (a small send buffer, a reader that starts late), from any offset.
func TestSendFile(t *testing.T) {
	a, b := tcpPair(t)
	a.SetWriteBuffer(256 << 10)
	b.SetReadBuffer(256 << 10)
	const size = 3<<20 + 123
	fd, err := MemfdCreate("sendfile-test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	if err := Ftruncate(fd, size+4096); err != nil {
		t.Fatal(err)
	}
	mem, err := MmapShared(fd, size+4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Munmap(mem)
	for i := range mem {
		mem[i] = byte(i*7 + i>>11)
	}
	const off = 4096 + 17
	want := append([]byte("hdr:"), mem[off:off+size-4096]...)

	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // let the socket fill first
		buf := make([]byte, len(want))
		b.SetReadDeadline(time.Now().Add(time.Minute))
		n, _ := io.ReadFull(b, buf)
		got <- buf[:n]
	}()
	w := NewWriter(rawConn(t, a))
	if err := w.SendMore([]byte("hdr:")); err != nil {
		t.Fatal(err)
	}
	if err := w.SendFile(fd, off, size-4096); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("read %d bytes, want %d; equal prefix: %v", len(g), len(want), bytes.HasPrefix(want, g))
	}
}

// TestSendFileUnsupported: a descriptor sendfile cannot read from (here a
// socket) is reported as errors.ErrUnsupported, with nothing written.
func TestSendFileUnsupported(t *testing.T) {
	a, b := tcpPair(t)
	c, _ := tcpPair(t)
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewWriter(rawConn(t, a))
	if err := w.SendFile(int(f.Fd()), 0, 100); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SendFile from a socket: %v, want errors.ErrUnsupported", err)
	}
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := b.Read(make([]byte, 1)); n != 0 || !isTimeout(err) {
		t.Fatalf("the peer read %d bytes (%v) after a refused SendFile", n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestReadBulkLowWater: with the low-water mark, a bulk read that finds the
// socket drained waits until the bytes it wants have arrived, not for the
// first segment; a later read that wants less is woken by less (the mark
// comes down before it waits); and a mark above what ever comes does not
// hang a read when the peer closes.
func TestReadBulkLowWater(t *testing.T) {
	for _, mark := range []bool{false, true} {
		a, b := tcpPair(t)
		r := NewReader(rawConn(t, b), 0)
		if mark {
			r.EnableLowWater()
		}
		// The mark stays under an eighth of the receive buffer, which
		// autotuning grows as bulk data flows: move some first, until the
		// buffer holds 8 times 256 KiB at least, and want up to 512 KiB
		// (how far autotuning gets within 1 GiB depends on how busy the
		// machine is).
		const minWant = 256 << 10
		piece := make([]byte, 16<<10)
		rb := warmReceiveBuffer(t, a, b, r, 8*minWant)
		want := min(512<<10, rb/8/len(piece)*len(piece))
		t.Logf("receive buffer %d bytes: %d bytes wanted in %d pieces", rb, want, want/len(piece))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for sent := 0; sent < want; sent += len(piece) {
				if _, err := a.Write(piece); err != nil {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		// 16 to 32 pieces 2 ms apart: without the mark each read returns
		// with the piece or two that came; with it, a read that waits
		// returns once all that it wants has come. A read may find some
		// bytes there already, and the kernel wakes a reader early when the
		// receive window fills, so allow a few reads.
		buf := make([]byte, want)
		reads := 0
		for got := 0; got < want; reads++ {
			m, err := r.ReadBulk(buf[got:], want-got)
			if err != nil {
				t.Fatal(err)
			}
			got += m
		}
		t.Logf("mark %v: %d reads for %d bytes in %d pieces", mark, reads, want, want/len(piece))
		if mark && reads > 8 {
			t.Fatalf("with the mark: %d reads for %d bytes in %d pieces 2 ms apart", reads, want, want/len(piece))
		}
		<-done

		// A small message after the bulk: the mark must come down.
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		go a.Write([]byte("ping"))
		small := make([]byte, 64)
		n, err := r.Read(small)
		if err != nil || string(small[:n]) != "ping" {
			t.Fatalf("small read after a bulk one: %q, %v", small[:n], err)
		}

		// A bulk read that wants more than ever comes ends when the peer
		// closes, with what came.
		go func() { a.Write([]byte("tail")); a.Close() }()
		n, err = r.ReadBulk(buf, want)
		if err != nil || string(buf[:n]) != "tail" {
			t.Fatalf("bulk read before close: %q, %v", buf[:n], err)
		}
		if n, err = r.ReadBulk(buf, want); n != 0 || err != io.EOF {
			t.Fatalf("bulk read at the end: %d, %v; want 0, EOF", n, err)
		}
		b.SetReadDeadline(time.Time{})
	}
}

// warmReceiveBuffer streams bulk data from a to b, read through r, until
// b's receive buffer (grown by the kernel's autotuning) holds at least
// want bytes, and returns its size. It gives up after 1 GiB.
func warmReceiveBuffer(t *testing.T, a, b *net.TCPConn, r *Reader, want int) int {
	t.Helper()
	rcvbuf := func() int { return receiveBuffer(t, b) }
	chunk := make([]byte, 1<<20)
	buf := make([]byte, 1<<20)
	for moved := 0; moved < 1<<30; moved += len(chunk) {
		if n := rcvbuf(); n >= want {
			return n
		}
		errc := make(chan error, 1)
		go func() { _, err := a.Write(chunk); errc <- err }()
		for got := 0; got < len(chunk); {
			m, err := r.ReadBulk(buf[got:], len(chunk)-got)
			if err != nil {
				t.Fatal(err)
			}
			got += m
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("the receive buffer grew to %d bytes after 1 GiB, want %d", rcvbuf(), want)
	return 0
}

// TestReadBulkKeepsReceiveBuffer: on a connection whose receive buffer has
// not grown yet, a bulk read that waits sets no mark the buffer could not
// hold, so the kernel does not resize the buffer (and, before Linux's fix
// of late 2025, clamp the receive window to the mark).
func TestReadBulkKeepsReceiveBuffer(t *testing.T) {
	a, b := tcpPair(t)
	r := NewReader(rawConn(t, b), 0)
	r.EnableLowWater()
	rcvbuf := func() int { return receiveBuffer(t, b) }
	before := rcvbuf()
	const want = 1 << 20
	buf := make([]byte, want)
	done := make(chan error, 1)
	go func() {
		for got := 0; got < want; {
			m, err := r.ReadBulk(buf[got:], want-got)
			if err != nil {
				done <- err
				return
			}
			got += m
		}
		done <- nil
	}()
	time.Sleep(50 * time.Millisecond) // the read waits, its mark set
	if after := rcvbuf(); after != before {
		t.Errorf("receive buffer %d bytes before a bulk read of %d waited, %d while it waits: the mark made the kernel resize it", before, want, after)
	}
	if _, err := a.Write(make([]byte, want)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// receiveBuffer returns the size of c's receive buffer (SO_RCVBUF).
func receiveBuffer(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	var n int
	var serr error
	if err := rawConn(t, c).Control(func(fd uintptr) {
		n, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return n
}
