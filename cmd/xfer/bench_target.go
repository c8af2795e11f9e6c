package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Time limits for the serve process that bench starts.
const (
	targetStartTimeout = 15 * time.Second // until it prints its address
	targetStopTimeout  = 5 * time.Second  // from SIGTERM to SIGKILL
)

// target is a serve process started by bench. stop must be called on every
// path once startTarget has succeeded.
type target struct {
	addr   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	log    *slog.Logger
	exited chan struct{} // closed once the process has been waited for
	err    error         // cmd.Wait's result, valid once exited is closed
}

// startTarget runs the executable at path with args (a serve command line)
// and env, and waits until it prints its address. If it dies or takes too
// long first, the error carries the end of its stderr.
func startTarget(ctx context.Context, path string, args, env []string, log *slog.Logger) (*target, error) {
	t := &target{
		cmd:    exec.Command(path, args...),
		stderr: &tailBuffer{max: 8 << 10},
		log:    log,
		exited: make(chan struct{}),
	}
	t.cmd.Env = env
	t.cmd.Stderr = t.stderr
	setParentDeathSignal(t.cmd)
	// A pipe of our own rather than StdoutPipe: Wait closes StdoutPipe's
	// reader while we may still be reading the banner from it.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start serve: %w", err)
	}
	t.cmd.Stdout = pw
	err = t.cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start serve: %w", err)
	}
	log.Debug("started serve", "pid", t.cmd.Process.Pid, "args", args)
	go func() {
		t.err = t.cmd.Wait()
		close(t.exited)
	}()

	addrc := make(chan string, 1)
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), serveBanner); ok {
				addrc <- strings.TrimSpace(a)
				break
			}
		}
		io.Copy(io.Discard, pr) // never let the child block on a full pipe
	}()

	timer := time.NewTimer(targetStartTimeout)
	defer timer.Stop()
	select {
	case t.addr = <-addrc:
		log.Debug("serve is listening", "addr", t.addr)
		return t, nil
	case <-t.exited:
		return nil, fmt.Errorf("serve exited before listening (%v)%s", t.err, t.stderrTail())
	case <-timer.C:
		t.stop()
		return nil, fmt.Errorf("serve did not report its address within %v%s", targetStartTimeout, t.stderrTail())
	case <-ctx.Done():
		t.stop()
		return nil, context.Cause(ctx)
	}
}

// pid is the process id of the serve process.
func (t *target) pid() int { return t.cmd.Process.Pid }

// stop sends SIGTERM, waits for the process to exit (SIGKILL after
// targetStopTimeout) and reports an unclean exit. It is idempotent.
func (t *target) stop() error {
	select {
	case <-t.exited:
	default:
		if err := t.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.log.Warn("signal serve", "err", err)
		}
		select {
		case <-t.exited:
		case <-time.After(targetStopTimeout):
			t.log.Warn("serve did not exit after SIGTERM; killing it", "pid", t.pid())
			_ = t.cmd.Process.Kill()
			<-t.exited
		}
	}
	if t.err != nil {
		return fmt.Errorf("serve (pid %d) exited uncleanly: %v%s", t.pid(), t.err, t.stderrTail())
	}
	return nil
}

// stderrTail formats the end of the child's stderr for an error message.
func (t *target) stderrTail() string {
	s := strings.TrimSpace(t.stderr.String())
	if s == "" {
		return ""
	}
	return "; its stderr:\n" + s
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
