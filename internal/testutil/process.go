package testutil

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a process that StartProcess started has, once
// asked to stop with SIGTERM at the test's end, before it is killed; a
// variable for the tests.
var stopGrace = 10 * time.Second

// StartProcess starts cmd, a daemon that announces itself with a line on
// its standard output (its address, or that it is ready), and returns that
// line without its newline; the rest of its output is read and dropped, so
// that it never blocks on a full pipe. cmd must not have Stdout set. A
// start that fails, or a process that closes its output before a whole
// line, fails the test. The test's end stops the process: SIGTERM, then
// SIGKILL if it has not exited ten seconds later.
func StartProcess(tb testing.TB, cmd *exec.Cmd) string {
	tb.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stop(cmd) })
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		tb.Fatalf("%s printed %q: %v", strings.Join(cmd.Args, " "), line, err)
	}
	go io.Copy(io.Discard, r)
	return strings.TrimSuffix(line, "\n")
}

// stop ends a started process: SIGTERM, SIGKILL after stopGrace.
func stop(cmd *exec.Cmd) {
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopGrace):
		cmd.Process.Kill()
		<-done
	}
}
