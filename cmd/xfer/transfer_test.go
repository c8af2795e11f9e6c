package main

import (
	"bytes"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/probe"
)

// TestTransferFlags checks the validation of transfer's flags in process.
func TestTransferFlags(t *testing.T) {
	good := func() transferFlags {
		return transferFlags{role: "producer", localHost: "127.0.0.1", remoteHost: "127.0.0.1", localPort: 15500, remotePort: 15502,
			ctrlPort: 15501, sizeMB: 4, n: 3, mode: bench.ModeCopy, dtype: "f32", timeout: time.Second, pull: "auto"}
	}
	if p, err := good().plan(); err != nil || p.size != 4<<20 || p.memoryMB != 2*4+16 || p.dtype != connector.F32 {
		t.Fatalf("good flags: %+v, %v", p, err)
	}
	c := good()
	c.role, c.localPort, c.remotePort = "consumer", 15502, 15500
	if p, err := c.plan(); err != nil || p.memoryMB != 4+16 || p.role != connector.RoleConsumer {
		t.Fatalf("good consumer flags: %+v, %v", p, err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		mod  func(*transferFlags)
		want string
	}{
		{"no role", func(f *transferFlags) { f.role = "" }, "--role is required"},
		{"unknown role", func(f *transferFlags) { f.role = "both" }, `--role "both": must be producer or consumer`},
		{"unknown mode", func(f *transferFlags) { f.mode = "fast" }, `--mode "fast": must be copy, zerocopy or gpu`},
		{"gpu id without gpu", func(f *transferFlags) { f.gpuID = 1 }, "--gpu-id 1: only with --mode gpu"},
		{"zero size", func(f *transferFlags) { f.sizeMB = 0 }, "--tensor-size-mb 0: must be between 1"},
		{"negative size", func(f *transferFlags) { f.sizeMB = -5 }, "--tensor-size-mb -5"},
		{"huge size", func(f *transferFlags) { f.sizeMB = transferMaxSizeMB + 1 }, "--tensor-size-mb"},
		{"no transfers", func(f *transferFlags) { f.n = 0 }, "--num-transfers 0: must be at least 1"},
		{"no timeout", func(f *transferFlags) { f.timeout = 0 }, "--timeout 0s: must be positive"},
		{"dtype", func(f *transferFlags) { f.dtype = "f64" }, `--dtype "f64": must be f32 or u8`},
		{"pull", func(f *transferFlags) { f.pull = "push" }, `--pull: unknown pull "push"`},
		{"no local host", func(f *transferFlags) { f.localHost = "" }, "--local-host is required"},
		{"consumer without remote host", func(f *transferFlags) { f.role, f.remoteHost = "consumer", "" }, "--remote-host is required on the consumer"},
		{"port 0", func(f *transferFlags) { f.localPort = 0 }, "--local-port 0: must be between 1 and 65535"},
		{"port too large", func(f *transferFlags) { f.remotePort = 65536 }, "--remote-port 65536"},
		{"ctrl port", func(f *transferFlags) { f.ctrlPort = -1 }, "--ctrl-port -1"},
		{"same ports same host", func(f *transferFlags) { f.remotePort = f.localPort }, "both 15500 on the same host"},
		{"same ports loopback", func(f *transferFlags) { f.remotePort, f.remoteHost = f.localPort, "localhost" }, "on the same host"},
		{"producer data = ctrl", func(f *transferFlags) { f.ctrlPort = f.localPort }, "--local-port and --ctrl-port are both 15500"},
		{"consumer remote = ctrl", func(f *transferFlags) { f.role, f.ctrlPort = "consumer", f.remotePort }, "--remote-port and --ctrl-port are both 15502"},
		{"consumer local = producer ctrl", func(f *transferFlags) {
			f.role, f.localPort, f.remotePort, f.ctrlPort = "consumer", 15502, 15500, 15502
		}, "the producer's control channel"},
		{"out on producer", func(f *transferFlags) { f.out = filepath.Join(dir, "x.safetensors") }, "--out is the consumer's"},
		{"out unwritable", func(f *transferFlags) {
			f.role, f.localPort, f.remotePort, f.out = "consumer", 15502, 15500, "/nonexistent/x"
		}, "--out /nonexistent/x"},
		{"pool too small", func(f *transferFlags) { f.memoryMB = 4 }, "--memory-mb 4: the pool must hold a tensor of 4 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good()
			tc.mod(&f)
			_, err := f.plan()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Different hosts may use the same port; --remote-host is optional
	// on the producer.
	f := good()
	f.remoteHost, f.remotePort = "10.0.0.2", f.localPort
	if _, err := f.plan(); err != nil {
		t.Fatal(err)
	}
	f.remoteHost = ""
	if _, err := f.plan(); err != nil {
		t.Fatal(err)
	}
}

// TestTransferCommandErrors runs the command in process: the errors of
// the flags reach the user, --mode gpu before anything is opened, and
// --local-host defaults to $RDMA_TEST_HOST.
func TestTransferCommandErrors(t *testing.T) {
	t.Setenv(envTestHost, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"transfer", "--role", "producer"}, "--local-host is required"},
		{[]string{"transfer", "--role", "sender", "--local-host", "127.0.0.1"}, `--role "sender"`},
		{[]string{"transfer", "--role", "producer", "--local-host", "127.0.0.1", "--tensor-size-mb", "0"}, "--tensor-size-mb 0"},
		{[]string{"transfer", "--role", "consumer", "--local-host", "127.0.0.1", "--remote-host", "127.0.0.1"}, "both 15500 on the same host"},
		{[]string{"transfer", "--role", "producer", "--local-host", "127.0.0.1", "--transport", "carrier-pigeon"}, "--transport"},
	} {
		var o, e bytes.Buffer
		if code := run(t.Context(), tc.args, &o, &e); code == 0 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("xfer %s: exit %d, stderr %q; want %q", strings.Join(tc.args, " "), code, e.String(), tc.want)
		}
	}
	// $RDMA_TEST_HOST fills --local-host: the error is now about ports.
	t.Setenv(envTestHost, "127.0.0.1")
	var o, e bytes.Buffer
	args := []string{"transfer", "--role", "consumer", "--remote-host", "127.0.0.1"}
	if code := run(t.Context(), args, &o, &e); code == 0 || !strings.Contains(e.String(), "both 15500 on the same host (127.0.0.1 and 127.0.0.1)") {
		t.Errorf("with %s set: exit %d, stderr %q", envTestHost, code, e.String())
	}
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// transferSide is one running xfer transfer process.
type transferSide struct {
	role   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error // of Wait, once done is closed
}

// transferTest describes a pair of processes.
type transferTest struct {
	host      string // the address both sides use
	ports     []int  // producer data, consumer data, control
	transport string
	env       []string
}

func newTransferTest(t *testing.T, transport string) *transferTest {
	tt := &transferTest{host: "127.0.0.1", ports: freePorts(t, 3), transport: transport, env: cleanEnv()}
	if transport == "rdma" {
		dev := testutil.RequireVerbs(t)
		tt.host = "10.0.0.1" // the VM's dummy0, which rxe and siw sit on
		if dev != "" {
			tt.env = append(tt.env, "RDMA_DEVICE_NAME="+dev)
		}
	}
	return tt
}

// start starts one side with the common flags and extra ones.
func (tt *transferTest) start(t *testing.T, role string, extra ...string) *transferSide {
	t.Helper()
	local, remote := tt.ports[0], tt.ports[1]
	if role == "consumer" {
		local, remote = remote, local
	}
	args := append([]string{"transfer", "--role", role, "--local-host", tt.host, "--remote-host", tt.host,
		"--local-port", strconv.Itoa(local), "--remote-port", strconv.Itoa(remote), "--ctrl-port", strconv.Itoa(tt.ports[2]),
		"--transport", tt.transport}, extra...)
	s := &transferSide{role: role, cmd: exec.Command(xferBinary(t), args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	s.cmd.Env = tt.env
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

// wait waits up to d for the process to end and returns its exit code; the
// test fails when it does not end.
func (s *transferSide) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		s.cmd.Process.Kill()
		<-s.done
		t.Fatalf("the %s did not end within %v; stdout:\n%s\nstderr:\n%s", s.role, d, s.stdout, s.stderr)
	}
	return s.cmd.ProcessState.ExitCode()
}

// lines parses the side's JSON lines: the transfers, then the summary.
func (s *transferSide) lines(t *testing.T) ([]map[string]any, map[string]any) {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.stdout.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("the %s printed %q, not JSON: %v", s.role, l, err)
		}
		out = append(out, m)
	}
	if len(out) == 0 || out[len(out)-1]["summary"] != true {
		t.Fatalf("the %s printed no summary:\n%s", s.role, s.stdout)
	}
	return out[:len(out)-1], out[len(out)-1]
}

func transferTransports() []string {
	if os.Getenv(testutil.EnvRDMAVM) != "" {
		return []string{"rdma"}
	}
	return []string{"tcp", "shm"}
}

// TestTransferTwoProcesses runs the producer and the consumer as two
// processes of the built binary, over each transport, in both modes and
// both start orders, and checks what both print.
func TestTransferTwoProcesses(t *testing.T) {
	const sizeMB, n = 2, 3
	for _, transport := range transferTransports() {
		for _, mode := range []string{bench.ModeCopy, bench.ModeZeroCopy} {
			for _, first := range []string{"producer", "consumer"} {
				t.Run(transport+"/"+mode+"/"+first+"-first", func(t *testing.T) {
					tt := newTransferTest(t, transport)
					common := []string{"--tensor-size-mb", strconv.Itoa(sizeMB), "--num-transfers", strconv.Itoa(n),
						"--json", "--timeout", "30s"}
					out := filepath.Join(t.TempDir(), "last.safetensors")
					second := map[string]string{"producer": "consumer", "consumer": "producer"}[first]
					// The mode is the producer's: the consumer reports it.
					extra := func(role string) []string {
						if role == "consumer" {
							return append(common, "--out", out)
						}
						return append(common, "--mode", mode)
					}
					a := tt.start(t, first, extra(first)...)
					// The first side says it waits before the second starts.
					deadline := time.Now().Add(10 * time.Second)
					for !strings.Contains(a.stderr.String(), "waiting for the "+second) && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
					if !strings.Contains(a.stderr.String(), "waiting for the "+second) {
						t.Fatalf("the %s did not say it waits for the %s: %s", first, second, a.stderr)
					}
					b := tt.start(t, second, extra(second)...)
					sides := map[string]*transferSide{first: a, second: b}
					for _, s := range sides {
						if code := s.wait(t, 60*time.Second); code != 0 {
							t.Fatalf("the %s exited %d; stderr:\n%s", s.role, code, s.stderr)
						}
					}
					var lastMD5 string
					for role, s := range sides {
						ts, sum := s.lines(t)
						if len(ts) != n {
							t.Fatalf("the %s printed %d transfers, want %d", role, len(ts), n)
						}
						for i, r := range ts {
							if r["transfer"] != float64(i+1) || r["bytes"] != float64(sizeMB<<20) || r["md5_ok"] != true ||
								r["seconds"].(float64) <= 0 || r["gbps"].(float64) <= 0 || r["put_seconds"].(float64) <= 0 {
								t.Errorf("the %s's transfer %d: %v", role, i+1, r)
							}
						}
						if role == "consumer" {
							lastMD5 = ts[n-1]["md5"].(string)
						}
						if sum["transfers"] != float64(n) || sum["bytes"] != float64(n*sizeMB<<20) || sum["md5_ok"] != true ||
							sum["mode"] != mode || sum["transport"] != transport || sum["role"] != role ||
							sum["seconds"].(float64) <= 0 || sum["bytes_per_sec"].(float64) <= 0 ||
							sum["gbps_min"].(float64) > sum["gbps_median"].(float64) || sum["gbps_median"].(float64) > sum["gbps_max"].(float64) {
							t.Errorf("the %s's summary: %v", role, sum)
						}
					}
					// --out holds the last tensor, readable as safetensors.
					data, err := os.ReadFile(out)
					if err != nil {
						t.Fatal(err)
					}
					tensors, meta, err := connector.DecodeSafetensors(data)
					if err != nil {
						t.Fatal(err)
					}
					tn, ok := tensors["tensor"]
					if !ok || tn.DType != connector.F32 || len(tn.Data) != sizeMB<<20 || fmt.Sprintf("%x", md5.Sum(tn.Data)) != lastMD5 || meta["md5"] != lastMD5 {
						t.Fatalf("--out: %v %v %d bytes, md5 %s, want %s", tn.DType, tn.Shape, len(tn.Data), fmt.Sprintf("%x", md5.Sum(tn.Data)), lastMD5)
					}
				})
			}
		}
	}
}

// TestTransferBenchmark: under --benchmark nothing is hashed and md5_ok is
// null; text output (no --json) has the summary; pulling by read works.
func TestTransferBenchmark(t *testing.T) {
	for _, transport := range transferTransports() {
		t.Run(transport, func(t *testing.T) {
			tt := newTransferTest(t, transport)
			args := []string{"--benchmark", "--tensor-size-mb", "1", "--num-transfers", "4", "--secret", "s3cret-s3cret-s3cret"}
			p := tt.start(t, "producer", append(args, "--json", "--dtype", "u8")...)
			c := tt.start(t, "consumer", append(args, "--pull", "read")...)
			for _, s := range []*transferSide{p, c} {
				if code := s.wait(t, 60*time.Second); code != 0 {
					t.Fatalf("the %s exited %d; stderr:\n%s", s.role, code, s.stderr)
				}
			}
			ts, sum := p.lines(t)
			for _, r := range ts {
				if v, ok := r["md5_ok"]; !ok || v != nil || r["md5"] != nil {
					t.Errorf("transfer under --benchmark: %v", r)
				}
			}
			if v, ok := sum["md5_ok"]; !ok || v != nil || sum["transfers"] != 4.0 || sum["dtype"] != "U8" || sum["pull"] != "read" {
				t.Errorf("summary under --benchmark: %v", sum)
			}
			text := c.stdout.String()
			for _, want := range []string{"transfer 4/4: 1MiB", "consumer: 4 transfers of 1MiB (U8 tensors) over " + transport, "pull read", "get GB/s: median", "MD5 not checked (--benchmark)"} {
				if !strings.Contains(text, want) {
					t.Errorf("the consumer's output lacks %q:\n%s", want, text)
				}
			}
		})
	}
}

// TestTransferMismatchedSides: sides that disagree on the run both fail,
// each saying why.
func TestTransferMismatchedSides(t *testing.T) {
	tt := newTransferTest(t, "tcp")
	p := tt.start(t, "producer", "--tensor-size-mb", "1", "--num-transfers", "2", "--timeout", "20s")
	c := tt.start(t, "consumer", "--tensor-size-mb", "1", "--num-transfers", "3", "--timeout", "20s")
	for _, s := range []*transferSide{p, c} {
		if code := s.wait(t, 40*time.Second); code == 0 || !strings.Contains(s.stderr.String(), "give both the same --num-transfers") {
			t.Errorf("the %s: exit %d, stderr %s", s.role, code, s.stderr)
		}
	}
}

// TestTransferWrongSecret: a consumer whose secret differs from the
// producer's gets nothing, and both sides fail saying why.
func TestTransferWrongSecret(t *testing.T) {
	tt := newTransferTest(t, "tcp")
	p := tt.start(t, "producer", "--tensor-size-mb", "1", "--num-transfers", "1", "--secret", "secret-one-secret-one", "--timeout", "20s")
	c := tt.start(t, "consumer", "--tensor-size-mb", "1", "--num-transfers", "1", "--secret", "secret-two-secret-two", "--timeout", "20s")
	for _, s := range []*transferSide{p, c} {
		if code := s.wait(t, 40*time.Second); code == 0 || !strings.Contains(s.stderr.String(), "secret") {
			t.Errorf("the %s: exit %d, stderr %s", s.role, code, s.stderr)
		}
	}
}

// TestTransferGPU: where there is no CUDA, --mode gpu fails at once,
// before anything is opened, saying CUDA is not available, why, and what
// to do (tools/gpu/check.sh runs the mode on a GPU).
func TestTransferGPU(t *testing.T) {
	if probe.CUDA() == nil {
		t.Skip("this host has CUDA")
	}
	f := transferFlags{role: "producer", mode: bench.ModeGPU, localHost: "127.0.0.1", localPort: 15500, remotePort: 15501, ctrlPort: 15502, sizeMB: 1, n: 1, timeout: time.Second}
	if _, err := f.plan(); err == nil || !strings.Contains(err.Error(), "CUDA is not available") || !strings.Contains(err.Error(), "--mode copy") {
		t.Fatalf("plan: %v", err)
	}
	var o, eb bytes.Buffer
	args := []string{"transfer", "--role", "producer", "--local-host", "127.0.0.1", "--mode", "gpu"}
	if code := run(t.Context(), args, &o, &eb); code == 0 || !strings.Contains(eb.String(), "CUDA is not available") {
		t.Errorf("xfer %s: exit %d, stderr %q", strings.Join(args, " "), code, eb.String())
	}
	_, e, code := xferRun(t, cleanEnv(), "transfer", "--role", "consumer", "--local-host", "127.0.0.1", "--remote-host", "127.0.0.1",
		"--remote-port", "15502", "--mode", "gpu", "--gpu-id", "1")
	if code == 0 || !strings.Contains(e, "CUDA is not available") || !strings.Contains(e, "--mode copy") {
		t.Fatalf("exit %d, stderr %q", code, e)
	}
}

// TestTransferTimeout: a side whose other side never comes gives up after
// --timeout, saying so.
func TestTransferTimeout(t *testing.T) {
	tt := newTransferTest(t, "tcp")
	for _, role := range []string{"producer", "consumer"} {
		s := tt.start(t, role, "--timeout", "1s")
		if code := s.wait(t, 30*time.Second); code == 0 || !strings.Contains(s.stderr.String(), "within --timeout 1s") {
			t.Errorf("the %s alone: exit %d, stderr %s", role, code, s.stderr)
		}
	}
}

// killMidway starts both sides for many transfers, waits until the consumer
// has printed a few, and SIGKILLs the victim. It returns the survivor.
func killMidway(t *testing.T, transport, victim string) *transferSide {
	tt := newTransferTest(t, transport)
	// Under --benchmark most of a transfer's time is the Get (and the
	// copy into the producer's pool), so the kill mostly lands in one.
	args := []string{"--tensor-size-mb", "16", "--num-transfers", "100000", "--benchmark", "--json", "--timeout", "10s"}
	p := tt.start(t, "producer", args...)
	c := tt.start(t, "consumer", args...)
	// Wait for the third transfer, timing the third, then kill at a
	// random point of the next: in the producer's fill, its Put, the
	// consumer's Get or the control messages, a different one each run.
	deadline := time.Now().Add(30 * time.Second)
	var at [4]time.Time
	for n := 0; n < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("not 3 transfers after 30 s; producer:\n%s\nconsumer:\n%s", p.stderr, c.stderr)
		}
		if m := strings.Count(c.stdout.String(), "\n"); m > n {
			n = min(m, 3)
			at[n] = time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	period := max(at[3].Sub(at[2]), time.Millisecond)
	time.Sleep(rand.N(period))
	sides := map[string]*transferSide{"producer": p, "consumer": c}
	if err := sides[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sides[victim].done
	if victim == "producer" {
		return c
	}
	return p
}

// TestTransferProducerKilled: a producer killed mid-run makes the consumer
// fail with an error within its --timeout, not hang or panic.
func TestTransferProducerKilled(t *testing.T) {
	for _, transport := range transferTransports() {
		t.Run(transport, func(t *testing.T) {
			c := killMidway(t, transport, "producer")
			code := c.wait(t, 20*time.Second) // --timeout 10s, and slack
			e := c.stderr.String()
			if code == 0 || !strings.Contains(e, "xfer: ") || strings.Contains(e, "panic") || strings.Contains(e, "goroutine ") {
				t.Fatalf("consumer: exit %d, stderr:\n%s", code, e)
			}
			t.Logf("the consumer said: %s", strings.TrimSpace(e))
		})
	}
}

// TestTransferConsumerKilled: a consumer killed mid-run makes the producer
// fail with a clear error within its --timeout; its slot goes back to the
// pool as the connection drops (the connector's own tests check the
// reclaiming itself).
func TestTransferConsumerKilled(t *testing.T) {
	for _, transport := range transferTransports() {
		t.Run(transport, func(t *testing.T) {
			p := killMidway(t, transport, "consumer")
			code := p.wait(t, 20*time.Second)
			e := p.stderr.String()
			if code == 0 || !strings.Contains(e, "consumer") || strings.Contains(e, "panic") || strings.Contains(e, "goroutine ") {
				t.Fatalf("producer: exit %d, stderr:\n%s", code, e)
			}
			t.Logf("the producer said: %s", strings.TrimSpace(e))
		})
	}
}

// TestTransferAmongStrays: 500 stray connections at the producer's control
// port (idle, trickling, garbage, closing at once), and more at its data
// port, before and while the consumer connects: the producer drops them
// and serves its consumer, with a secret and without, over each
// transport. A short handshake_timeout keeps it quick.
func TestTransferAmongStrays(t *testing.T) {
	ctrlStrays := []testutil.Stray{
		testutil.StrayIdle,
		testutil.StrayClose,
		testutil.StrayGarbage,
		{Name: "trickle", Send: []byte(`{"type":"ready","pull":"write"}`), Trickle: true},
	}
	dataStrays := []testutil.Stray{testutil.StrayIdle, testutil.StrayClose, testutil.StrayGarbage}
	for _, transport := range transferTransports() {
		for _, secret := range []string{"", "s3cret-s3cret-s3cret"} {
			name := transport + map[bool]string{false: "/open", true: "/secret"}[secret != ""]
			t.Run(name, func(t *testing.T) {
				tt := newTransferTest(t, transport)
				tt.env = append(tt.env, envPrefix+"HANDSHAKE_TIMEOUT=500ms")
				if secret != "" {
					tt.env = append(tt.env, envPrefix+"SECRET="+secret)
				}
				args := []string{"--tensor-size-mb", "1", "--num-transfers", "2", "--json", "--timeout", "60s"}
				p := tt.start(t, "producer", args...)
				for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.stderr.String(), "waiting for the consumer"); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the producer does not wait for its consumer: %s", p.stderr)
					}
				}
				stop := make(chan struct{})
				defer close(stop)
				ctrl := net.JoinHostPort(tt.host, strconv.Itoa(tt.ports[2]))
				data := net.JoinHostPort(tt.host, strconv.Itoa(tt.ports[0]))
				dataFlood := testutil.Flood(data, dataStrays, 100, 4, stop)
				// Half the strays before the consumer, half while it
				// connects.
				testutil.Flood(ctrl, ctrlStrays, 250, 16, stop)()
				during := testutil.Flood(ctrl, ctrlStrays, 250, 16, stop)
				c := tt.start(t, "consumer", args...)
				for _, s := range []*transferSide{p, c} {
					if code := s.wait(t, 90*time.Second); code != 0 {
						t.Fatalf("the %s exited %d among strays; stderr:\n%s", s.role, code, s.stderr)
					}
				}
				for _, s := range []*transferSide{p, c} {
					if ts, sum := s.lines(t); len(ts) != 2 || sum["md5_ok"] != true {
						t.Fatalf("the %s: %v %v", s.role, ts, sum)
					}
				}
				during()
				dataFlood()
				if !strings.Contains(p.stderr.String(), "other connections were dropped") {
					t.Errorf("the producer did not say it dropped strays:\n%s", p.stderr)
				}
			})
		}
	}
}
