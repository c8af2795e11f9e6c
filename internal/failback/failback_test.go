package failback

import (
	"testing"
	"time"
)

var order = map[string]int{"rdma": 0, "shm": 1, "tcp": 2}

func testConfig() *Config {
	return &Config{First: time.Second, Max: 10 * time.Second, Rank: func(n string) int { return order[n] }}
}

// A peer that loses the transport again soon after moving back to it (a
// link that flaps) goes on with the backoff where it was, rather than
// probing every second again.
func TestPauseAfterFlapKeepsBackoff(t *testing.T) {
	c := testConfig()
	var s State
	s.backAt, s.backWait = time.Now().Add(-20*time.Second), 4*time.Second
	if w, start, ok := s.Pause(c, "rdma", "long after the last move back"); !ok || !start || w != time.Second {
		t.Errorf("paused 20 s after the last move back (the cap is 10 s): first probe in %v (start %v, ok %v), want 1s", w, start, ok)
	}
	s.paused = nil
	s.backAt, s.backWait = time.Now(), 4*time.Second
	if w, _, _ := s.Pause(c, "rdma", "just after the last move back"); w != 8*time.Second {
		t.Errorf("paused just after a move back with a wait of 4 s: first probe in %v, want 8s", w)
	}
}

// A pause as good as the one paused is refused; a better one replaces it;
// a reconnection as good as the paused transport ends the pause; a claim
// ends it and records the move back.
func TestPauseOrder(t *testing.T) {
	c := testConfig()
	var s State
	if _, start, ok := s.Pause(c, "shm", "lost"); !ok || !start {
		t.Fatalf("first pause: start %v ok %v", start, ok)
	}
	if _, _, ok := s.Pause(c, "tcp", "lost"); ok {
		t.Error("a lesser pause replaced shm")
	}
	if _, start, ok := s.Pause(c, "rdma", "lost"); !ok || start {
		t.Errorf("a better pause: start %v (the prober runs), ok %v", start, ok)
	}
	s.Reconnected(c, "shm")
	if pt, ok := s.Paused(); !ok || pt.Name != "rdma" {
		t.Errorf("reconnected on shm ended the pause of rdma: %+v %v", pt, ok)
	}
	old := s.paused
	s.Reconnected(c, "rdma")
	if _, ok := s.Paused(); ok || s.Claim(old) {
		t.Error("reconnected on rdma did not end its pause")
	}
	s.Pause(c, "rdma", "lost again")
	pt := s.paused
	if !s.Claim(pt) || s.paused != nil || s.backWait != pt.Wait || len(s.Status()) != 0 {
		t.Error("a claim did not end the pause")
	}
}

type prober struct {
	s     *State
	tries int
	fails int
}

func (p *prober) Try(pt *Pause) error {
	p.tries++
	if p.tries < 3 {
		return errTest
	}
	p.s.Claim(pt)
	return nil
}

func (p *prober) Failed(*Pause, time.Duration, error) { p.fails++ }

type testErr struct{}

func (testErr) Error() string { return "refused" }

var errTest = testErr{}

// Run probes with backoff until a probe moves the peer, then ends.
func TestRun(t *testing.T) {
	c := &Config{First: time.Millisecond, Max: 4 * time.Millisecond, Rank: func(n string) int { return order[n] }}
	var s State
	s.Pause(c, "rdma", "lost")
	p := &prober{s: &s}
	done := make(chan struct{})
	s.Run(t.Context(), done, c, p)
	if p.tries != 3 || p.fails != 2 || s.proberOn {
		t.Errorf("tries %d fails %d prober on %v", p.tries, p.fails, s.proberOn)
	}
	if st := s.Status(); st != nil {
		t.Errorf("status after the move back: %+v", st)
	}
}
