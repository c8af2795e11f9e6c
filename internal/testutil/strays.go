package testutil

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Stray is a connection to a listener that is not its peer: a port
// check, a scanner, a slow-loris, a client of another protocol.
type Stray struct {
	Name string
	// Send is what it writes once connected; nil: nothing (idle).
	Send []byte
	// Trickle writes Send a byte every 20 ms instead of at once.
	Trickle bool
	// Close closes the connection at once, after Send.
	Close bool
	// Garbage writes 256 random bytes after Send, the last a line feed.
	Garbage bool
}

// Strays any listener may see: one that connects and says nothing, one
// that closes at once, one that sends random bytes.
var (
	StrayIdle    = Stray{Name: "idle"}
	StrayClose   = Stray{Name: "close", Close: true}
	StrayGarbage = Stray{Name: "garbage", Garbage: true}
)

// DialStray connects to addr as s and plays it in the background (counted
// in wg) until the other end closes the connection or stop is closed. It
// reports whether it could connect.
func DialStray(addr string, s Stray, stop <-chan struct{}, wg *sync.WaitGroup) bool {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.play(nc, stop)
	}()
	return true
}

func (s Stray) play(nc net.Conn, stop <-chan struct{}) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		buf := make([]byte, 4096)
		for {
			if _, err := nc.Read(buf); err != nil {
				return
			}
		}
	}()
	defer func() {
		nc.Close()
		<-closed
	}()
	if s.Trickle {
		for _, b := range s.Send {
			if _, err := nc.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-closed:
				return
			case <-stop:
				return
			}
		}
	} else if s.Send != nil {
		nc.Write(s.Send)
	}
	if s.Garbage {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(rand.IntN(256))
		}
		b[len(b)-1] = '\n'
		nc.Write(b)
	}
	if s.Close {
		return
	}
	select {
	case <-closed:
	case <-stop:
	}
}

// Flood connects n strays to addr, of each of kinds in turn, from workers
// goroutines at once. The function it returns waits until every stray has
// ended (its connection closed by the other end, or stop closed) and
// returns how many connected.
func Flood(addr string, kinds []Stray, n, workers int, stop <-chan struct{}) func() int {
	var next, connected atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if DialStray(addr, kinds[i%int64(len(kinds))], stop, &wg) {
					connected.Add(1)
				}
			}
		}()
	}
	return func() int { wg.Wait(); return int(connected.Load()) }
}
