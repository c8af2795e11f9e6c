package directory

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// RegState is the state of one of this client's registrations.
type RegState string

// The states of a registration.
const (
	// Registered: the entry is live and its lease or heartbeats are being
	// renewed.
	Registered RegState = "registered"
	// Retrying: renewals are failing (the backend does not answer), but
	// the entry may still be live: its TTL has not run out since the last
	// renewal that got through.
	Retrying RegState = "retrying"
	// Lost: the entry is gone (its lease expired, the process was paused
	// beyond its TTL, a coordinator restarted, or another node holds the
	// ID); the client registers it again, with backoff, until it is
	// deregistered or the directory is closed.
	Lost RegState = "lost"
)

// Registration is the state of a node this client registered.
type Registration struct {
	NodeID string   `json:"node_id"`
	State  RegState `json:"state"`
	// Since is when the registration entered State.
	Since time.Time `json:"since"`
	// Reregistrations counts how often the entry was lost and registered
	// again.
	Reregistrations uint64 `json:"reregistrations"`
	// Renewed is when the latest renewal that got through was sent (the
	// coordinator) or answered (etcd): the entry lives until at least
	// Renewed + the TTL, less the time the answer took to come back.
	Renewed time.Time `json:"renewed"`
	// LastError is the latest failure of a renewal or re-registration,
	// while State is not Registered.
	LastError string `json:"last_error,omitempty"`
	// TookOver says that the first registration took the place of the
	// entry of this node's previous run while that entry was still live
	// (its process provably gone: docs/DIRECTORY.md, "One owner per node
	// ID"), so the node ID was never missing from the directory. It is
	// false after the entry was lost and registered again.
	TookOver bool `json:"took_over,omitempty"`
}

// ErrTaken matches the error of a registration whose node ID a live node
// holds already (a TakenError).
var ErrTaken = errors.New("node ID in use")

// TakenError is a registration refused because another live node holds the
// node ID. Registration is create-if-absent: a node refreshes or removes
// only the entry it created itself.
type TakenError struct {
	NodeID string
	// Holder is the address list of the entry that holds the ID (empty
	// when the holder published none that could be read).
	Holder []string
}

func (e *TakenError) Error() string {
	at := "an unknown address"
	if len(e.Holder) > 0 {
		at = strings.Join(e.Holder, ", ")
	}
	return fmt.Sprintf("directory: node ID %s is held by a live node at %s: stop it, pick another --node-id, or, if it was this node's previous run, wait for its entry's TTL to run out (on etcd, a previous run on this host that is gone is taken over at once)", e.NodeID, at)
}

// Is makes a TakenError match ErrTaken.
func (e *TakenError) Is(target error) bool { return target == ErrTaken }

// takenBy builds a TakenError from the holder's encoded entry.
func takenBy(id string, holder []byte) *TakenError {
	te := &TakenError{NodeID: id}
	if e, err := Unmarshal(holder); err == nil {
		te.Holder = e.Addrs
	}
	return te
}

// newIncarnation returns a random ID for one registration of a node: the
// coordinator lets only the incarnation that created an entry refresh or
// remove it.
func newIncarnation() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// regState tracks one registration's state; its methods are safe for
// concurrent use.
type regState struct {
	mu sync.Mutex
	r  Registration
}

// newRegState starts the state of a registration whose first renewal was
// sent at renewed.
func newRegState(id string, renewed time.Time) *regState {
	return &regState{r: Registration{NodeID: id, State: Registered, Since: time.Now(), Renewed: renewed}}
}

// renewed records a renewal that got through, sent or answered at t.
func (s *regState) renewed(t time.Time) {
	s.mu.Lock()
	if t.After(s.r.Renewed) {
		s.r.Renewed = t
	}
	s.mu.Unlock()
}

// tookOver records whether the entry took over a live one of this node.
func (s *regState) tookOver(b bool) {
	s.mu.Lock()
	s.r.TookOver = b
	s.mu.Unlock()
}

// set moves to state s (err says why, when s is not Registered) and
// reports the state it left.
func (s *regState) set(st RegState, err error) RegState {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.r.State
	if old != st {
		s.r.State, s.r.Since = st, time.Now()
	}
	s.r.LastError = ""
	if st != Registered && err != nil {
		s.r.LastError = err.Error()
	}
	if old == Lost && st == Registered {
		s.r.Reregistrations++
	}
	return old
}

func (s *regState) get() Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r
}

// backoff returns the delay before retry n (0, 1, ...): 100 ms doubling up
// to limit, with up to a quarter of jitter so that nodes cut off together
// do not retry together.
func backoff(n int, limit time.Duration) time.Duration {
	d := 100 * time.Millisecond
	for i := 0; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	var b [1]byte
	rand.Read(b[:])
	return d - d/4*time.Duration(b[0])/255
}
