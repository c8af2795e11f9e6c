package auth

import (
	"errors"
	"sync"
	"time"
)

// Senders are the replay windows of many senders, each named by a 64-bit
// ID (a call's nonce: the sender's random ID, then its call number),
// for calls that carry a timestamp checked against a span: a sender
// unseen for two spans is forgotten, since its calls' timestamps are out
// of the span by then. At most Max senders are kept; past it, new ones are
// refused until old ones expire (only holders of the secret make senders).
// The zero value, with Span and Max set, is ready; safe for concurrent use.
type Senders struct {
	Span time.Duration
	Max  int

	mu     sync.Mutex
	ws     map[uint64]*sender
	pruned time.Time
}

type sender struct {
	Window
	last time.Time // the latest call
}

// The errors of Senders.Accept.
var (
	ErrTooManySenders = errors.New("too many clients in the replay window: try again")
	ErrReplayed       = errors.New("authentication failed: a replayed call")
)

// Accept records sender id's sequence number n, at now, and says whether
// it is new: nil, ErrReplayed or ErrTooManySenders.
func (s *Senders) Accept(id, n uint64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ws == nil {
		s.ws = map[uint64]*sender{}
	}
	if now.Sub(s.pruned) > s.Span {
		for k, w := range s.ws {
			if now.Sub(w.last) > 2*s.Span {
				delete(s.ws, k)
			}
		}
		s.pruned = now
	}
	w := s.ws[id]
	if w == nil {
		if len(s.ws) >= s.Max {
			return ErrTooManySenders
		}
		w = &sender{}
		s.ws[id] = w
	}
	if !w.Accept(n) {
		return ErrReplayed
	}
	w.last = now
	return nil
}
