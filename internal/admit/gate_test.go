package admit

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if a goroutine or a file descriptor is
// left behind.
func TestMain(m *testing.M) { testmain.Run(m) }

// pair returns the accepted end of a new loopback connection dialed from
// host (127.0.0.1, 127.0.0.2: both are loopback on Linux), and the
// dialed end.
func pair(t *testing.T, ln net.Listener, host string) (accepted, dialed net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(host)}}
	dialed, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close(); dialed.Close() })
	return accepted, dialed
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// failsAtOnce reports whether a read on accepted fails at once, its
// deadline past, as an evicted connection's does.
func failsAtOnce(accepted net.Conn) bool {
	done := make(chan error, 1)
	go func() {
		_, err := accepted.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		return isTimeout(err)
	case <-time.After(2 * time.Second):
		accepted.Close()
		<-done
		return false
	}
}

// isOpen reports whether a read on accepted waits, its deadline not past.
func isOpen(accepted net.Conn) bool {
	accepted.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := accepted.Read(make([]byte, 1))
	return isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestGateEvictsOldest: a full gate evicts its oldest pending connection
// for a new one (its reads fail at once); the others stay open, and Leave
// tells which was evicted.
func TestGateEvictsOldest(t *testing.T) {
	ln := listen(t)
	g := New(Config{Max: 3, PerSource: 3})
	var tickets []*Ticket
	var accepted []net.Conn
	for range 4 {
		a, _ := pair(t, ln, "127.0.0.1")
		tickets = append(tickets, g.Admit(a))
		accepted = append(accepted, a)
	}
	if !failsAtOnce(accepted[0]) {
		t.Fatal("the oldest connection was not evicted")
	}
	if !isOpen(accepted[3]) {
		t.Fatal("the newest connection was evicted")
	}
	if g.Pending() != 3 || g.Evictions() != 1 {
		t.Fatalf("pending %d, evictions %d: want 3 and 1", g.Pending(), g.Evictions())
	}
	if !tickets[0].Evicted() || tickets[0].Leave() {
		t.Fatal("the oldest's ticket does not say it was evicted")
	}
	for i, tk := range tickets[1:] {
		if !tk.Leave() || !tk.Leave() {
			t.Fatalf("ticket %d: evicted", i+1)
		}
	}
	if g.Pending() != 0 {
		t.Fatalf("%d pending after every Leave", g.Pending())
	}
	// Connections that left no longer count: three more fit again.
	for range 3 {
		a, _ := pair(t, ln, "127.0.0.1")
		defer g.Admit(a).Leave()
	}
	if g.Evictions() != 1 {
		t.Fatalf("evictions %d after room was made: want 1", g.Evictions())
	}
}

// TestGatePerSource: a source at its cap evicts its own oldest, not
// another source's connections, even when those are older.
func TestGatePerSource(t *testing.T) {
	ln := listen(t)
	g := New(Config{Max: 4, PerSource: 2})
	other, _ := pair(t, ln, "127.0.0.2")
	keep := g.Admit(other)
	var tickets []*Ticket
	var accepted []net.Conn
	for range 3 {
		a, _ := pair(t, ln, "127.0.0.1")
		tickets = append(tickets, g.Admit(a))
		accepted = append(accepted, a)
	}
	if !failsAtOnce(accepted[0]) || tickets[0].Leave() {
		t.Fatal("the source's oldest connection was not evicted")
	}
	if keep.Evicted() || !isOpen(other) {
		t.Fatal("the other source's connection was evicted")
	}
	if !keep.Leave() || !tickets[1].Leave() || !tickets[2].Leave() {
		t.Fatal("a connection within its source's cap was evicted")
	}
}

// TestGateDefaults: zero bounds are the defaults, and PerSource never
// exceeds Max.
func TestGateDefaults(t *testing.T) {
	if g := New(Config{}); g.max != DefaultMax || g.perSource != DefaultPerSource {
		t.Fatalf("zero config: max %d, per source %d", g.max, g.perSource)
	}
	if g := New(Config{Max: 2, PerSource: 5}); g.perSource != 2 {
		t.Fatalf("per source %d above max 2", g.perSource)
	}
}

// TestGateConcurrent: admissions and leaves from many goroutines keep
// the bounds (run it with -race).
func TestGateConcurrent(t *testing.T) {
	ln := listen(t)
	g := New(Config{Max: 5, PerSource: 5})
	conns := make([]net.Conn, 40)
	for i := range conns {
		conns[i], _ = pair(t, ln, "127.0.0.1")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := 0
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := g.Admit(c)
			if n := g.Pending(); n > 5 {
				t.Errorf("%d pending, above max 5", n)
			}
			if tk.Leave() {
				mu.Lock()
				kept++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if g.Pending() != 0 || uint64(kept)+g.Evictions() != uint64(len(conns)) {
		t.Fatalf("pending %d, kept %d, evicted %d of %d", g.Pending(), kept, g.Evictions(), len(conns))
	}
}

// TestGateGrace: with Grace, TryAdmit refuses a newcomer rather than evict
// a connection younger than Grace, and evicts it once it is older.
func TestGateGrace(t *testing.T) {
	g := New(Config{Max: 4, PerSource: 2, Grace: 200 * time.Millisecond})
	ln := listen(t)
	a, _ := pair(t, ln, "127.0.0.1")
	b, _ := pair(t, ln, "127.0.0.1")
	c, _ := pair(t, ln, "127.0.0.1")
	ta, ok := g.TryAdmit(a)
	if !ok {
		t.Fatal("first connection refused")
	}
	if _, ok := g.TryAdmit(b); !ok {
		t.Fatal("second connection refused")
	}
	if tc, ok := g.TryAdmit(c); ok || tc != nil {
		t.Fatal("a third from the source evicted one still in its grace")
	}
	if g.Refusals() != 1 || g.Evictions() != 0 || g.Pending() != 2 {
		t.Fatalf("refusals %d, evictions %d, pending %d", g.Refusals(), g.Evictions(), g.Pending())
	}
	time.Sleep(250 * time.Millisecond)
	if _, ok := g.TryAdmit(c); !ok {
		t.Fatal("refused after the grace ended")
	}
	if !ta.Evicted() || g.Evictions() != 1 || !failsAtOnce(a) {
		t.Fatal("the oldest was not evicted after its grace")
	}
	// Admit ignores the grace.
	d, _ := pair(t, ln, "127.0.0.1")
	g.Admit(d)
	if g.Evictions() != 2 {
		t.Fatal("Admit did not evict")
	}
}
