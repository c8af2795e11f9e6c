package testmain

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Run(m) }

// TestFDLeak opens a pipe after the snapshot: the check must name both of
// its ends, and pass once they are closed.
func TestFDLeak(t *testing.T) {
	before, err := openFDs()
	if err != nil {
		t.Skipf("no %s: %v", procFD, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	err = fdLeaks(before, &options{}, 50*time.Millisecond, &log)
	if err == nil || !strings.Contains(err.Error(), "2 file descriptor(s) leaked") || !strings.Contains(err.Error(), "pipe:[") {
		t.Errorf("with an open pipe: %v, want both ends reported", err)
	}
	r.Close()
	w.Close()
	if err := fdLeaks(before, &options{}, 50*time.Millisecond, &log); err != nil {
		t.Errorf("after closing the pipe: %v", err)
	}
}

// TestFDClosedLate: a descriptor that a goroutine closes within the grace
// period is not a leak.
func TestFDClosedLate(t *testing.T) {
	before, err := openFDs()
	if err != nil {
		t.Skipf("no %s: %v", procFD, err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		f.Close()
	}()
	if err := fdLeaks(before, &options{}, 5*time.Second, &bytes.Buffer{}); err != nil {
		t.Errorf("a descriptor closed after 100ms: %v", err)
	}
	<-done
}

func TestIgnoreFD(t *testing.T) {
	before := map[int]string{3: "anon_inode:[eventpoll]", 4: "socket:[1]"}
	now := map[int]string{3: "anon_inode:[eventpoll]", 4: "socket:[2]", 7: "/memfd:xfer (deleted)"}
	var o options
	got := newFDs(before, now, &o, &bytes.Buffer{})
	if strings.Join(got, ", ") != "fd 4 (socket:[2]), fd 7 (/memfd:xfer (deleted))" {
		t.Errorf("new descriptors %q: a reused number with another target, and a new one, are both new", got)
	}
	IgnoreFD("a cache the package keeps", func(target string) bool { return strings.HasPrefix(target, "/memfd:") })(&o)
	var log bytes.Buffer
	got = newFDs(before, now, &o, &log)
	if len(got) != 1 || !strings.Contains(log.String(), "a cache the package keeps") {
		t.Errorf("with the memfd ignored: %q, log %q", got, log.String())
	}
}

func TestCheck(t *testing.T) {
	var o options
	Check("verbs objects", func() error { return errors.New("qps=1") })(&o)
	Check("fine", func() error { return nil })(&o)
	err := leaks(nil, &o, &bytes.Buffer{})
	if err == nil || err.Error() != "verbs objects: qps=1" {
		t.Errorf("leaks() = %v, want the failing check named", err)
	}
}

func TestGoroutineLeak(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { <-stop; close(done) }()
	err := leaks(nil, &options{}, &bytes.Buffer{})
	close(stop)
	<-done
	if err == nil || !strings.Contains(err.Error(), "goroutines leaked") {
		t.Errorf("leaks() with a goroutine parked = %v", err)
	}
}
