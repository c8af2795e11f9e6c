package testmain

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// FDGrace is how long the descriptor check waits for descriptors that are
// still being closed (by a goroutine that goleak saw leave, or by the
// runtime) before it reports them as leaked.
const FDGrace = 2 * time.Second

// Option changes what Run checks or does around the tests.
type Option func(*options)

type options struct {
	checks   []check
	after    []func()
	ignoreFD []ignoreFD
}

type check struct {
	name string
	f    func() error
}

type ignoreFD struct {
	match func(target string) bool
	why   string
}

// Check adds a leak check of the package's own, run after a successful
// test run: f returns an error that says what leaked, or nil.
func Check(name string, f func() error) Option {
	return func(o *options) { o.checks = append(o.checks, check{name, f}) }
}

// After runs f once the tests are done, before the leak checks, whether the
// tests passed or not: for the test binary's own clean-up (a temporary
// directory of built binaries).
func After(f func()) Option {
	return func(o *options) { o.after = append(o.after, f) }
}

// IgnoreFD exempts from the descriptor check the descriptors whose target
// (what /proc/self/fd/N links to, such as "socket:[1234]" or
// "/memfd:xfer (deleted)") match reports true. why says why the package
// may keep them open; it is printed when one is ignored.
func IgnoreFD(why string, match func(target string) bool) Option {
	return func(o *options) { o.ignoreFD = append(o.ignoreFD, ignoreFD{match, why}) }
}

// Run runs the tests of m, checks for leaks after a successful run, and
// exits the process with the result. Call it from TestMain.
func Run(m *testing.M, opts ...Option) {
	os.Exit(Main(m, opts...))
}

// Main is Run without the exit: it returns the exit code, for a TestMain
// that has more to do.
func Main(m *testing.M, opts ...Option) int {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	initPoller()
	before, _ := openFDs()

	code := m.Run()
	for _, f := range o.after {
		f()
	}
	if code != 0 {
		return code
	}
	if err := leaks(before, &o, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	return 0
}

// leaks runs every check and returns an error naming everything that
// leaked, or nil.
func leaks(before map[int]string, o *options, log io.Writer) error {
	var errs []error
	if err := goleak.Find(); err != nil {
		errs = append(errs, fmt.Errorf("goroutines leaked: %w", err))
	}
	if before != nil {
		if err := fdLeaks(before, o, FDGrace, log); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range o.checks {
		if err := c.f(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// fdLeaks waits up to grace for the descriptors opened since before to be
// closed, and returns an error listing those that are still open.
func fdLeaks(before map[int]string, o *options, grace time.Duration, log io.Writer) error {
	deadline := time.Now().Add(grace)
	for {
		now, err := openFDs()
		if err != nil {
			return fmt.Errorf("list open file descriptors: %w", err)
		}
		leaked := newFDs(before, now, o, log)
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d file descriptor(s) leaked: %s", len(leaked), strings.Join(leaked, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newFDs lists the descriptors of now that were not open, with the same
// target, in before, less the ignored ones (which it logs).
func newFDs(before, now map[int]string, o *options, log io.Writer) []string {
	var leaked []string
	fds := make([]int, 0, len(now))
	for fd := range now {
		fds = append(fds, fd)
	}
	slices.Sort(fds)
next:
	for _, fd := range fds {
		target := now[fd]
		if old, ok := before[fd]; ok && old == target {
			continue
		}
		for _, ig := range o.ignoreFD {
			if ig.match(target) {
				fmt.Fprintf(log, "testmain: fd %d (%s) left open: %s\n", fd, target, ig.why)
				continue next
			}
		}
		leaked = append(leaked, fmt.Sprintf("fd %d (%s)", fd, target))
	}
	return leaked
}

// procFD lists the process's descriptors; a variable for the tests.
var procFD = "/proc/self/fd"

// openFDs maps the process's open descriptors to their targets. It fails
// where procFD does not exist.
func openFDs() (map[int]string, error) {
	d, err := os.Open(procFD)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	own := int(d.Fd())
	d.Close()
	if err != nil {
		return nil, err
	}
	fds := make(map[int]string, len(names))
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd == own {
			continue
		}
		target, err := os.Readlink(procFD + "/" + name)
		if err != nil {
			continue // closed meanwhile
		}
		fds[fd] = target
	}
	return fds, nil
}

// initPoller makes the Go runtime open its network poller's descriptors
// (an epoll instance and an eventfd on Linux), which live as long as the
// process, before the descriptors are counted: a pipe is registered with
// the poller.
func initPoller() {
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
}
