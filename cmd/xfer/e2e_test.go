package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/internal/testutil"
)

// The end-to-end tests build the xfer binary and run it against real
// engines on loopback, the way a user would.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the built binary, and fails the run if a test left a
// goroutine or a file descriptor behind.
func TestMain(m *testing.M) {
	testmain.Run(m, testmain.After(func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	}))
}

// envTestBinary names a prebuilt xfer binary for the end-to-end tests to
// use instead of building one: in the RDMA VM, under emulation, building
// takes minutes.
const envTestBinary = "TEST_XFER_BINARY"

// xferBinary builds the command once per test run (or takes
// $TEST_XFER_BINARY) and returns its path.
func xferBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped in -short mode")
	}
	if p := os.Getenv(envTestBinary); p != "" {
		return p
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "xfer-e2e-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "xfer")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// cleanEnv is the test's environment without XFER_ variables, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// xferRun runs the binary with args and returns stdout, stderr and the
// exit code.
func xferRun(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, xferBinary(t), args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("xfer %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("xfer %v: timed out; stderr:\n%s", args, e.String())
	}
	return o.String(), e.String(), code
}

func TestEndToEndBench(t *testing.T) {
	for _, transport := range []string{"tcp", "shm"} {
		for _, op := range []string{bench.OpWrite, bench.OpRead} {
			t.Run(transport+"/"+op, func(t *testing.T) {
				plot := filepath.Join(t.TempDir(), "bench.svg")
				stdout, stderr, code := xferRun(t, cleanEnv(), "bench", "--transport", transport, "--op", op,
					"--size", "64,64KiB", "--iters", "200", "--verify", "--json", "--plot", plot)
				if code != 0 {
					t.Fatalf("exit %d; stderr:\n%s", code, stderr)
				}
				lines := strings.Split(strings.TrimSpace(stdout), "\n")
				if len(lines) != 2 {
					t.Fatalf("got %d lines, want 2:\n%s", len(lines), stdout)
				}
				for i, size := range []float64{64, 65536} {
					m := checkJSONFields(t, []byte(lines[i]))
					if m["transport"] != transport || m["op"] != op || m["size_bytes"] != size || m["ops"] != 200.0 || m["verified"] != true {
						t.Errorf("line %d: %s", i+1, lines[i])
					}
					if bw, _ := m["bytes_per_sec"].(float64); bw <= 0 {
						t.Errorf("line %d: bytes_per_sec %v", i+1, m["bytes_per_sec"])
					}
				}
				if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
					t.Errorf("plot: %v", err)
				}
			})
		}
	}
}

// TestEndToEndBenchSecretFile: a bench with --secret-file authenticates
// against the target it starts, which reads the same file.
func TestEndToEndBenchSecretFile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("a-secret-of-this-test-long-enough\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := xferRun(t, cleanEnv(), "bench", "--transport", "tcp", "--size", "4KiB", "--iters", "100",
		"--verify", "--json", "--secret-file", secret)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if m := checkJSONFields(t, []byte(strings.TrimSpace(stdout))); m["verified"] != true {
		t.Errorf("%s", stdout)
	}
}

func TestEndToEndServe(t *testing.T) {
	cmd := exec.Command(xferBinary(t), "serve", "--listen", "127.0.0.1:0", "--transport", "tcp")
	cmd.Env = cleanEnv(envPrefix + "SECRET=open sesame, open sesame")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out := testutil.StartPiped(t, cmd)
	exited := make(chan struct{}) // closed once serve has been waited for
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})

	addrc := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addrc <- line
		cmd.Wait() // after the read: Wait closes the pipe
		close(exited)
	}()
	var line string
	select {
	case line = <-addrc:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve printed no address; stderr:\n%s", stderr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), serveBanner)
	if !ok || strings.HasSuffix(addr, ":0") {
		t.Fatalf("first line %q, want %q and the real address", line, serveBanner+"HOST:PORT")
	}

	// An external peer: the footer says whose CPU time is counted, and
	// send has a sink.
	stdout, errOut, code := xferRun(t, cleanEnv(envPrefix+"SECRET=open sesame, open sesame"), "bench", "--peer", addr, "--transport", "tcp",
		"--op", "send", "--size", "4KiB", "--iters", "100")
	if code != 0 || !strings.Contains(stdout, "counts this process only") || !strings.Contains(stdout, " send ") {
		t.Fatalf("bench --peer: exit %d\n%s%s", code, stdout, errOut)
	}
	// The wrong secret gets nothing.
	_, errOut, code = xferRun(t, cleanEnv(envPrefix+"SECRET=wrong-wrong-wrong-wrong"), "bench", "--peer", addr, "--size", "64", "--iters", "10")
	if code == 0 {
		t.Errorf("bench with the wrong secret succeeded")
	}
	t.Logf("wrong secret: %s", strings.TrimSpace(errOut))

	// Random garbage to the port never crashes it: afterwards a proper
	// peer is still served.
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 300 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("garbage %d: serve stopped accepting: %v\n%s", i, err, stderr.String())
		}
		junk := make([]byte, rng.IntN(2048))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		if i%3 == 0 && len(junk) >= 12 {
			copy(junk, "XFER\x01\x00\x00\x00") // a plausible header, then nonsense
		}
		nc.Write(junk)
		nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		io.Copy(io.Discard, nc)
		nc.Close()
	}
	stdout, errOut, code = xferRun(t, cleanEnv(envPrefix+"SECRET=open sesame, open sesame"), "bench", "--peer", addr, "--transport", "tcp",
		"--size", "4KiB", "--iters", "100", "--verify", "--json")
	if code != 0 || !strings.Contains(stdout, `"verified":true`) {
		t.Fatalf("bench after garbage: exit %d\n%s%s", code, stdout, errOut)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("serve still running 5s after SIGTERM; stderr:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM; stderr:\n%s", code, stderr.String())
	}
	t.Logf("serve stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

func TestEndToEndConfigErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(unknown, []byte("transport: tcp\nmemroy_mb: 64\n"), 0o600)
	os.WriteFile(bad, []byte("memory_mb: abc\n"), 0o600)
	misplaced := filepath.Join(dir, "misplaced.yaml")
	os.WriteFile(misplaced, []byte("dwcp:\n  log_level: info\nmemroy_mb: 64\n"), 0o600)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown key", nil, []string{"--config", unknown, "bench"}, `unknown.yaml:2: unknown key "memroy_mb"`},
		{"bad value", nil, []string{"bench", "--config", bad}, `bad.yaml:1: memory_mb: "abc": not an integer`},
		// Every unknown key at once, with where a misplaced one belongs.
		{"misplaced", nil, []string{"--config", misplaced, "bench"}, "misplaced.yaml:1: unknown key \"dwcp\": dwcp.log_level (line 2): log_level is a top-level key" +
			": write it at the top level\n" + misplaced + ":3: unknown key \"memroy_mb\": did you mean memory_mb?"},
		{"XFER_CONFIG", []string{envConfigFile + "=" + unknown}, []string{"serve", "--listen", ":0"}, `unknown key "memroy_mb"`},
		{"bad env", []string{envPrefix + "MEMORY_MB=abc"}, []string{"serve", "--listen", ":0"}, `XFER_MEMORY_MB="abc": not an integer`},
		{"bad flag", nil, []string{"bench", "--transport", "foo"}, `--transport="foo": not one of auto, rdma, shm, tcp`},
		{"no listen", nil, []string{"serve"}, "serve needs an address to listen on"},
		// The serve child refuses its configuration: bench reports why.
		{"child fails", nil, []string{"bench", "--memory-mb", "2000000", "--size", "64", "--iters", "1"}, "serve exited before listening"},
		{"dial fails", nil, []string{"bench", "--peer", "127.0.0.1:1", "--size", "64", "--iters", "1"}, "connect to the peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := xferRun(t, cleanEnv(tc.env...), tc.args...)
			if code == 0 {
				t.Fatalf("exit 0, want an error; stdout:\n%s", stdout)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
		})
	}
}

// TestEndToEndSHMFallback runs the target as another user, so that the
// kernel refuses the shm transport (pidfd_getfd needs ptrace rights over the
// peer): auto must fall back to tcp, say why in the log, and still work.
func TestEndToEndSHMFallback(t *testing.T) {
	bin := xferBinary(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the target as another user")
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--transport", "auto", "--log-level", "info")
	cmd.Env = cleanEnv()
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out := testutil.StartPiped(t, cmd)
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("serve as nobody: %v\n%s", err, stderr.String())
	}
	addr := strings.TrimPrefix(strings.TrimSpace(line), serveBanner)
	stdout, errOut, code := xferRun(t, cleanEnv(), "bench", "--peer", addr, "--transport", "auto",
		"--size", "64KiB", "--iters", "50", "--verify", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s%s", code, stdout, errOut)
	}
	if !strings.Contains(stdout, `"transport":"tcp"`) || !strings.Contains(stdout, `"verified":true`) {
		t.Fatalf("auto across users did not fall back to a working tcp: %s", stdout)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stderr.String(), "falling back") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if log := stderr.String(); !strings.Contains(log, "falling back") || !strings.Contains(log, "shm") {
		t.Fatalf("the fallback was not logged with its reason:\n%s", log)
	}
	t.Logf("serve's log: %s", strings.TrimSpace(stderr.String()))
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
