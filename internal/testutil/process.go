package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	out := StartPiped(tb, cmd)
	tb.Cleanup(func() { stop(cmd) })
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		tb.Fatalf("%s printed %q: %v", strings.Join(cmd.Args, " "), line, err)
	}
	go io.Copy(io.Discard, r)
	return strings.TrimSuffix(line, "\n")
}

// StartPiped starts cmd, whose Stdout must not be set, and returns its
// standard output; a start that fails fails the test. Ending the process
// is the caller's.
func StartPiped(tb testing.TB, cmd *exec.Cmd) io.ReadCloser {
	tb.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return out
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

// Pause stops p with SIGSTOP and returns once it has stopped. kill(2)
// returns before the stop takes effect: the kernel wakes one thread to
// take the signal, and until that thread has begun the group stop, the
// others can go on running (a thread on another CPU, one the network
// wakes), and answer a request that arrives just after Signal returns; a
// test that then expects no answer fails by chance. Pause reads each
// thread's state in /proc until at least one has stopped (T: the group
// stop has begun, and every other thread stops before it next runs the
// process's code) and none is running (R). It fails the test if that
// takes more than ten seconds, naming each thread's state.
func Pause(tb testing.TB, p *os.Process) {
	tb.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("SIGSTOP %d: %v", p.Pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		states, err := threadStates(p.Pid)
		if err != nil {
			tb.Fatalf("pausing %d: %v", p.Pid, err)
		}
		if paused(states) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pausing %d: not stopped 10 s after SIGSTOP; its threads' states: %s", p.Pid, states)
		}
		time.Sleep(time.Millisecond)
	}
}

// paused reports whether states, one letter a thread as in
// /proc/PID/task/TID/stat, show a process in a group stop: a thread
// stopped (T, or t when traced) and none running or runnable (R).
func paused(states string) bool {
	return strings.ContainsAny(states, "Tt") && !strings.Contains(states, "R")
}

// threadStates returns the state letter of each thread of pid, from
// /proc/PID/task/TID/stat.
func threadStates(pid int) (string, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var states []byte
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "stat"))
		if os.IsNotExist(err) {
			continue // the thread exited
		}
		if err != nil {
			return "", err
		}
		// The state follows the command name, which is in parentheses and
		// may itself hold spaces or parentheses: take the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return "", fmt.Errorf("%s/%s/stat: unexpected %q", dir, t.Name(), b)
		}
		states = append(states, b[i+2])
	}
	return string(states), nil
}
