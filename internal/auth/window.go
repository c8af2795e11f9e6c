package auth

// WindowSize is how many of the latest sequence numbers a Window
// remembers.
const WindowSize = 1024

// Window is a replay window over a sender's sequence numbers: the highest
// number accepted, and a bit for each of the WindowSize numbers up to it.
// Its zero value has accepted nothing. For one goroutine at a time.
type Window struct {
	max  uint64
	bits [WindowSize / 64]uint64
}

// Accept records sequence number n and reports whether it is new: not
// accepted before, and less than WindowSize below the highest accepted
// (an older one is refused, too old to tell).
func (w *Window) Accept(n uint64) bool {
	switch {
	case n > w.max:
		if n-w.max >= WindowSize {
			w.bits = [WindowSize / 64]uint64{}
		} else {
			for i := w.max + 1; i <= n; i++ {
				w.bits[(i%WindowSize)/64] &^= 1 << (i % 64)
			}
		}
		w.max = n
	case w.max-n >= WindowSize:
		return false
	}
	word, bit := &w.bits[(n%WindowSize)/64], uint64(1)<<(n%64)
	if *word&bit != 0 {
		return false
	}
	*word |= bit
	return true
}
