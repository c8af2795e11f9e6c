package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xferio/xfer"
)

// Options says what a soak runs. Zero values take the defaults of the
// flags in main.go.
type Options struct {
	Xfer     string        // the xfer binary: its serve is the server, its bench the rounds
	Duration time.Duration // how long to start new rounds
	// Bench is each size's --duration in a round's xfer bench.
	Bench time.Duration
	Sizes string // a round's --size
	// Churn is how many engines dial the server, and close, in each burst
	// of churn (half under the shm policy, half under tcp), besides Scans
	// raw TCP connections that send a few bytes that are not a handshake,
	// or nothing, and close. Bursts start ChurnEvery apart (which keeps
	// the client's ports in TIME_WAIT well below the ephemeral range).
	Churn, Scans int
	ChurnEvery   time.Duration
	// RSS, Goroutines and FDs bound each resource's growth (judge.go).
	RSS, Goroutines, FDs Bound
	Log                  io.Writer // progress, one line per round; nil: none
	// ServerLog, when set, is a file that gets all the server wrote to
	// stderr (XFER_LOG_LEVEL=info in the environment makes it say more).
	ServerLog string
}

// A Report is what a soak saw.
type Report struct {
	Command  string // the server's command line
	PID      int
	Duration time.Duration
	Rounds   map[string]int // by transport and op: "tcp write"
	Dials    int            // churn dials that connected and closed
	Scans    int            // raw connections made and closed
	Samples  []Sample
	Verdicts []Verdict
	// Unjudged says why there are no verdicts: too few samples.
	Unjudged error
	// Failures are rounds, dials or server events that went wrong; a soak
	// with any fails, whatever its verdicts.
	Failures []string
	// ServerLog is the last lines the server wrote to stderr.
	ServerLog string
}

// OK reports whether no round failed and every resource stayed flat.
func (r *Report) OK() bool {
	if len(r.Failures) > 0 || r.Unjudged != nil {
		return false
	}
	for _, v := range r.Verdicts {
		if !v.OK {
			return false
		}
	}
	return true
}

// Print writes the report for a person.
func (r *Report) Print(w io.Writer) {
	total := 0
	var kinds []string
	for _, k := range []string{"tcp write", "shm write", "tcp read", "shm read"} {
		total += r.Rounds[k]
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.Rounds[k]))
	}
	fmt.Fprintf(w, "soak: %s against one server, pid %d: %s\n", r.Duration.Round(time.Second), r.PID, r.Command)
	fmt.Fprintf(w, "rounds: %d verified benches (%s); churn: %d engines dialed and closed, %d raw connections; %d failures\n",
		total, strings.Join(kinds, ", "), r.Dials, r.Scans, len(r.Failures))
	if len(r.Samples) > 0 {
		fmt.Fprintf(w, "samples: %d, one after each round with the server idle; the first %d are warm-up; rss in MiB\n", len(r.Samples), warmUp(len(r.Samples)))
	}
	if len(r.Verdicts) > 0 {
		fmt.Fprintln(w, verdictHeader)
		for _, v := range r.Verdicts {
			fmt.Fprintln(w, v)
		}
	}
	if r.Unjudged != nil {
		fmt.Fprintln(w, "FAIL: no verdict:", r.Unjudged)
	}
	for _, f := range r.Failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
	if len(r.Failures) > 0 && r.ServerLog != "" {
		fmt.Fprintf(w, "the server's last lines:\n%s\n", r.ServerLog)
	}
	if r.OK() {
		fmt.Fprintln(w, "soak: PASS: no round failed and the server's rss, goroutines and descriptors stayed flat")
	} else {
		fmt.Fprintln(w, "soak: FAIL")
	}
}

// Run runs a soak and reports what it saw. Its error is for a soak that
// could not run at all (no binary, a server that never listened); what
// went wrong once it ran is in the Report's Failures.
func Run(ctx context.Context, o Options) (*Report, error) {
	dir, err := os.MkdirTemp("", "xfer-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	secret, err := exec.CommandContext(ctx, o.Xfer, "secret").Output()
	if err != nil {
		return nil, fmt.Errorf("%s secret: %w", o.Xfer, err)
	}
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		return nil, err
	}
	var slog io.Writer
	if o.ServerLog != "" {
		f, err := os.Create(o.ServerLog)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		slog = f
	}
	s, err := startServer(ctx, o.Xfer, secretFile, slog)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	rep := &Report{Command: strings.Join(s.cmd.Args, " "), PID: s.cmd.Process.Pid, Rounds: map[string]int{}}
	fail := func(format string, args ...any) {
		rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...))
	}

	start := time.Now()
	kinds := [][2]string{{"tcp", "write"}, {"shm", "write"}, {"tcp", "read"}, {"shm", "read"}}
	for round := 0; time.Since(start) < o.Duration && ctx.Err() == nil; round++ {
		k := kinds[round%len(kinds)]
		// The bench runs while bursts of churn follow one another, at
		// least one, until it is done.
		var benchErr error
		benchDone := make(chan struct{})
		go func() {
			defer close(benchDone)
			benchErr = benchRound(ctx, o, s.addr, secretFile, k[0], k[1])
		}()
		var churnErrs []error
		for burst := true; burst; {
			next := time.After(o.ChurnEvery)
			dials, scans, errs := churn(ctx, s.addr, string(secret), o.Churn, o.Scans)
			rep.Dials += dials
			rep.Scans += scans
			churnErrs = append(churnErrs, errs...)
			select {
			case <-benchDone:
				burst = false
			case <-next:
			}
		}
		<-benchDone
		if benchErr != nil {
			fail("round %d (%s %s): %v", round, k[0], k[1], benchErr)
		} else {
			rep.Rounds[k[0]+" "+k[1]]++
		}
		for _, err := range churnErrs {
			fail("round %d churn: %v", round, err)
		}
		if s.exited() {
			fail("the server exited during round %d: %v", round, s.waitErr)
			break
		}
		smp, err := s.settle(ctx)
		if err != nil {
			fail("round %d: sample: %v", round, err)
			continue
		}
		smp.Round = round
		rep.Samples = append(rep.Samples, smp)
		if o.Log != nil {
			fmt.Fprintf(o.Log, "round %d %s %s: rss %.1f MiB, %.0f goroutines, %.0f fds\n", round, k[0], k[1], smp.RSS/(1<<20), smp.Goroutines, smp.FDs)
		}
		if len(rep.Failures) > 20 {
			fail("stopped after %d failures", len(rep.Failures))
			break
		}
	}
	rep.Duration = time.Since(start)
	if err := s.stop(); err != nil {
		fail("stopping the server (SIGTERM): %v", err)
	}
	rep.ServerLog = s.tail()

	warm := warmUp(len(rep.Samples))
	series := []struct {
		name string
		unit float64
		val  func(Sample) float64
		b    Bound
	}{
		{"rss", 1 << 20, func(s Sample) float64 { return s.RSS }, o.RSS},
		{"goroutines", 1, func(s Sample) float64 { return s.Goroutines }, o.Goroutines},
		{"open fds", 1, func(s Sample) float64 { return s.FDs }, o.FDs},
	}
	for _, sr := range series {
		vals := make([]float64, len(rep.Samples))
		for i, smp := range rep.Samples {
			vals[i] = sr.val(smp)
		}
		v, err := judge(sr.name, sr.unit, vals, warm, sr.b)
		if err != nil {
			rep.Unjudged = err
			break
		}
		rep.Verdicts = append(rep.Verdicts, v)
	}
	return rep, nil
}

// benchRound runs one verified xfer bench against the server.
func benchRound(ctx context.Context, o Options, addr, secretFile, tr, op string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := []string{"bench", "--peer", addr, "--transport", tr, "--op", op, "--verify", "--json",
		"--size", o.Sizes, "--duration", o.Bench.String(), "--secret-file", secretFile}
	cmd := exec.CommandContext(ctx, o.Xfer, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xfer %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), lastLines(errOut.String(), 20))
	}
	n := 0
	for line := range strings.Lines(out.String()) {
		var rec struct {
			Transport string `json:"transport"`
			Op        string `json:"op"`
			Ops       int64  `json:"ops"`
			Verified  bool   `json:"verified"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return fmt.Errorf("xfer bench printed %q: %v", line, err)
		}
		if rec.Transport != tr || rec.Op != op || !rec.Verified || rec.Ops <= 0 {
			return fmt.Errorf("xfer bench --transport %s --op %s --verify reported %s", tr, op, strings.TrimSpace(line))
		}
		n++
	}
	if want := len(strings.Split(o.Sizes, ",")); n != want {
		return fmt.Errorf("xfer bench reported %d sizes, want %d:\n%s", n, want, out.String())
	}
	return nil
}

// churn dials the server from n engines of its own at once, half under
// the shm policy and half under tcp, checks that each got the transport
// it asked for, and closes them; and makes scans raw connections that
// send garbage, or nothing, and close.
func churn(ctx context.Context, addr, secret string, n, scans int) (dials, made int, errs []error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		policy := xfer.PolicySHM
		if i%2 == 1 {
			policy = xfer.PolicyTCP
		}
		wg.Go(func() {
			err := dialOnce(ctx, addr, strings.TrimSpace(secret), policy)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				dials++
			}
		})
	}
	for i := range scans {
		wg.Go(func() {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("raw connection: %w", err))
				mu.Unlock()
				return
			}
			if i%2 == 0 {
				c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
			}
			c.Close()
			mu.Lock()
			made++
			mu.Unlock()
		})
	}
	wg.Wait()
	return dials, made, errs
}

// dialOnce opens an engine, dials the server under policy, and closes both.
func dialOnce(ctx context.Context, addr, secret string, policy xfer.Policy) error {
	e, err := xfer.Open(ctx, xfer.Config{Transport: policy, Secret: secret, MemoryMB: 1})
	if err != nil {
		return fmt.Errorf("open an engine (%s): %w", policy, err)
	}
	defer e.Close()
	p, err := e.Dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("dial %s (%s): %w", addr, policy, err)
	}
	if got := p.Transport(); got != string(policy) {
		p.Close()
		return fmt.Errorf("dial %s under %s: connected over %s", addr, policy, got)
	}
	if _, ok := p.Region("default"); !ok {
		p.Close()
		return fmt.Errorf("dial %s (%s): the server exports no region \"default\"", addr, policy)
	}
	if err := p.Close(); err != nil {
		return fmt.Errorf("close the peer %s (%s): %w", addr, policy, err)
	}
	return e.Close()
}

// server is the long-running xfer serve.
type server struct {
	cmd     *exec.Cmd
	addr    string // where peers dial
	metrics string // its operations endpoint: http://HOST:PORT/metrics

	mu      sync.Mutex
	lines   []string // stderr's last lines
	done    chan struct{}
	waitErr error
	stopped bool
}

func startServer(ctx context.Context, bin, secretFile string, log io.Writer) (*server, error) {
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--secret-file", secretFile)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd, err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	addrc, metricsc := make(chan string, 1), make(chan string, 1)
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "xfer serve: listening on "); ok {
				addrc <- a
			}
		}
	})
	readers.Go(func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "xfer: metrics and status on http://"); ok {
				metricsc <- "http://" + a + "/metrics"
			}
			if log != nil {
				fmt.Fprintln(log, sc.Text())
			}
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			if len(s.lines) > 200 {
				s.lines = s.lines[100:]
			}
			s.mu.Unlock()
		}
	})
	go func() {
		readers.Wait()
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(s.done)
	}()
	timeout := time.After(30 * time.Second)
	for s.addr == "" || s.metrics == "" {
		select {
		case s.addr = <-addrc:
		case s.metrics = <-metricsc:
		case <-s.done:
			return nil, fmt.Errorf("%s exited before it listened: %v\n%s", cmd, s.waitErr, s.tail())
		case <-timeout:
			s.stop()
			return nil, fmt.Errorf("%s did not listen within 30s\n%s", cmd, s.tail())
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		}
	}
	return s, nil
}

func (s *server) exited() bool {
	select {
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.stopped
	default:
		return false
	}
}

// stop ends the server with SIGTERM, as an operator would, and reports
// anything but a clean exit within 10 s. It may be called again.
func (s *server) stop() error {
	s.mu.Lock()
	again := s.stopped
	s.stopped = true
	s.mu.Unlock()
	if again {
		return nil
	}
	select {
	case <-s.done:
		return fmt.Errorf("it had already exited: %v", s.waitErr)
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return errors.New("it did not exit within 10s of SIGTERM, killed")
	}
	return s.waitErr
}

func (s *server) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lastLines(strings.Join(s.lines, "\n"), 20)
}

// settle samples the server until two readings in a row agree on its
// goroutines and descriptors (peers that just closed are torn down on the
// server a moment later), or for 5 s, and returns the last.
func (s *server) settle(ctx context.Context) (Sample, error) {
	var prev Sample
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		smp, err := s.sample(ctx)
		if err != nil {
			return smp, err
		}
		if i > 0 && smp.Goroutines == prev.Goroutines && smp.FDs == prev.FDs || time.Now().After(deadline) {
			return smp, nil
		}
		prev = smp
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return smp, ctx.Err()
		}
	}
}

// sample reads the server's resources from its /metrics.
func (s *server) sample(ctx context.Context) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.metrics, nil)
	if err != nil {
		return Sample{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("GET %s: %s", s.metrics, resp.Status)
	}
	return parseMetrics(resp.Body, s.metrics)
}

// parseMetrics takes the three gauges a soak watches from a Prometheus
// text exposition.
func parseMetrics(r io.Reader, from string) (Sample, error) {
	var smp Sample
	want := map[string]*float64{
		"process_resident_memory_bytes": &smp.RSS,
		"go_goroutines":                 &smp.Goroutines,
		"process_open_fds":              &smp.FDs,
	}
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if p := want[name]; ok && p != nil {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				return smp, fmt.Errorf("%s: %s: %w", from, sc.Text(), err)
			}
			*p = v
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return smp, err
	}
	if found != len(want) {
		return smp, fmt.Errorf("%s has %d of process_resident_memory_bytes, go_goroutines and process_open_fds", from, found)
	}
	return smp, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
