package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// TestBenchDeviceRemoved is failover and failback as a user of the command
// sees them, in the RDMA VM: `xfer bench --verify --transport auto` runs
// over the RDMA device against an `xfer serve`, and the test deletes the
// device under it (rdma link delete). The bench goes on: its connection
// carries on over its control connection (tcp), without a new handshake,
// and says so in its log; it pauses rdma and probes it. The
// test adds the device back (rdma link add) while the bench runs: the same
// bench, on the same peer, is back on rdma within the probes' backoff, and
// finishes there, every byte verified. A new bench against the same xfer
// serve is on rdma too.
func TestBenchDeviceRemoved(t *testing.T) {
	dev := vmDevice(t)
	if _, err := exec.LookPath("rdma"); err != nil {
		t.Fatalf("the rdma tool (iproute2) deletes the device: %v", err)
	}
	typ, netdev := testutil.SoftLink(t, dev)
	env := cleanEnv("RDMA_DEVICE_NAME=" + dev)

	serve := exec.Command(xferBinary(t), "--log-level", "debug", "serve", "--listen", "127.0.0.1:0", "--transport", "auto")
	serve.Env = env
	var serveLog syncBuffer
	serve.Stderr = io.MultiWriter(os.Stderr, &serveLog)
	addr, ok := strings.CutPrefix(strings.TrimSpace(testutil.StartProcess(t, serve)), serveBanner)
	if !ok {
		t.Fatal("xfer serve did not announce its address")
	}
	bench := func(duration string, removeAfter time.Duration, removed func(log func() string)) (benchRow, string) {
		t.Helper()
		cmd := exec.Command(xferBinary(t), "--log-level", "debug", "bench", "--peer", addr, "--transport", "auto", "--verify",
			"--op", "write", "--size", "256KiB", "--depth", "4", "--duration", duration, "--json")
		cmd.Env = env
		var stdout bytes.Buffer
		var stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if removeAfter > 0 {
			// The bench runs (its log says so at debug level) on rdma.
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(stderr.String(), "msg=bench ") {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("the bench has not started after a minute:\n%s", stderr.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !strings.Contains(stderr.String(), "transport=rdma") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the bench did not start on rdma:\n%s", stderr.String())
			}
			time.Sleep(removeAfter)
			if out, err := exec.Command("rdma", "link", "delete", dev).CombinedOutput(); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("rdma link delete %s: %v: %s", dev, err, out)
			}
			t.Logf("deleted %s %s under the bench", typ, dev)
			removed(stderr.String)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("xfer bench: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
		case <-time.After(3 * time.Minute):
			cmd.Process.Kill()
			<-done
			t.Fatalf("xfer bench still runs after 3 minutes\nstderr: %s", stderr.String())
		}
		var row benchRow
		for _, line := range strings.Split(stdout.String(), "\n") {
			if strings.HasPrefix(line, "{") {
				if err := json.Unmarshal([]byte(line), &row); err != nil {
					t.Fatalf("bench output %q: %v", line, err)
				}
			}
		}
		if row.Ops == 0 || !row.Verified {
			t.Fatalf("bench result %+v: no verified operations\nstdout: %s\nstderr: %s", row, stdout.String(), stderr.String())
		}
		return row, stderr.String()
	}

	addBack := func() {
		if out, err := exec.Command("rdma", "link", "add", dev, "type", typ, "netdev", netdev).CombinedOutput(); err != nil {
			t.Fatalf("rdma link add %s type %s netdev %s: %v: %s", dev, typ, netdev, err, out)
		}
		// Back when its port is ACTIVE and its first GID is set.
		port := filepath.Join("/sys/class/infiniband", dev, "ports/1")
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, _ := os.ReadFile(filepath.Join(port, "state"))
			gid, _ := os.ReadFile(filepath.Join(port, "gids/0"))
			g := strings.TrimSpace(string(gid))
			if strings.Contains(string(st), "ACTIVE") && g != "" && strings.Trim(g, "0:") != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is not ACTIVE with a GID 30s after rdma link add: state %q, gid 0 %q", dev, st, gid)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("added %s back", dev)
	}
	// 45 s: the device goes 3 s in; the bench's probes of rdma begin 1 s
	// after the pause and double (1, 3, 7, 15, 31 s after it), and verbs
	// does not reopen a removed device for up to 10 s while it is listed.
	row, logs := bench("45s", 3*time.Second, func(log func() string) {
		// The peer paused rdma (on its first operation after the break).
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(log(), "transport paused for a peer") {
			if time.Now().After(deadline) {
				t.Fatalf("the bench did not pause rdma 30 s after %s was deleted:\n%s", dev, log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // a probe or two fail meanwhile
		addBack()
	})
	t.Logf("with %s deleted 3s into the bench and added back: %d verified WRITEs, ending on %s", dev, row.Ops, row.Transport)
	// The connection moved to its control connection, tcp, with the
	// operations in flight repeated there.
	lesser := "tcp"
	if !strings.Contains(logs, "from=rdma to=tcp") || !strings.Contains(logs, "without a new handshake") {
		t.Errorf("the bench's log does not say its connection moved from rdma to tcp inside itself:\n%s", logs)
	}
	if !strings.Contains(logs, "paused=rdma now="+lesser) {
		t.Errorf("the bench's log does not say it paused rdma:\n%s", logs)
	}
	if !strings.Contains(logs, "the peer is back on it") || !strings.Contains(logs, "from="+lesser+" to=rdma") {
		t.Errorf("the bench's log does not say the peer moved back to rdma:\n%s", logs)
	}
	if row.Transport != "rdma" {
		t.Fatalf("the bench ended on %q, not back on rdma, after %s was added back:\n%s", row.Transport, dev, logs)
	}
	// xfer serve kept its one peer throughout: the move to tcp was inside
	// the connection, and the move back resumed the peer.
	// (It is gone once the bench exits.)
	sl := serveLog.String()
	resumed := strings.Index(sl, "peer resumed on a new connection")
	if gone := strings.Index(sl, "peer gone"); strings.Count(sl, "peer connected") != 1 || resumed < 0 || gone >= 0 && gone < resumed {
		t.Errorf("xfer serve did not keep its one peer through the failover and the move back:\n%s", sl)
	}

	row, logs = bench("2s", 0, nil)
	if row.Transport != "rdma" {
		t.Fatalf("a new bench against the same xfer serve after rdma link add ran on %q, not rdma:\n%s", row.Transport, logs)
	}
}

// benchRow is the part of xfer bench's JSON line the failover test reads.
type benchRow struct {
	Transport string `json:"transport"`
	Ops       int64  `json:"ops"`
	Verified  bool   `json:"verified"`
}
