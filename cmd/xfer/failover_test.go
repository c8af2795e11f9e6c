package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/probe"
)

// TestBenchDeviceRemoved is failover as a user of the command sees it, in
// the RDMA VM: `xfer bench --verify --transport auto` runs over the RDMA
// device against an `xfer serve`, and the test deletes the device under it
// (rdma link delete). The bench finishes, every byte verified, on the next
// transport, and says so in its log. After rdma link add, a new bench
// against the same xfer serve is back on rdma.
func TestBenchDeviceRemoved(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	if dev == "" {
		devs, err := probe.Devices()
		if err != nil || len(devs) == 0 {
			t.Fatalf("no devices: %v", err)
		}
		dev = devs[0].Name
	}
	if _, err := exec.LookPath("rdma"); err != nil {
		t.Fatalf("the rdma tool (iproute2) deletes the device: %v", err)
	}
	typ, netdev := testutil.SoftLink(t, dev)
	env := cleanEnv("RDMA_DEVICE_NAME=" + dev)

	serve := exec.Command(xferBinary(t), "--log-level", "debug", "serve", "--listen", "127.0.0.1:0", "--transport", "auto")
	serve.Env = env
	serve.Stderr = os.Stderr
	addr, ok := strings.CutPrefix(strings.TrimSpace(testutil.StartProcess(t, serve)), serveBanner)
	if !ok {
		t.Fatal("xfer serve did not announce its address")
	}
	bench := func(duration string, removeAfter time.Duration) (benchRow, string) {
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

	row, logs := bench("20s", 3*time.Second)
	t.Logf("with %s deleted 3s into the bench: %d verified WRITEs, ending on %s", dev, row.Ops, row.Transport)
	if row.Transport == "rdma" || row.Transport == "" {
		t.Fatalf("the bench ended on %q after %s was deleted", row.Transport, dev)
	}
	// Operations in flight when the device went are repeated (a failover);
	// one that begins after the connection failed redials (a fallback).
	// Either way the log says where the peer went.
	if !strings.Contains(logs, "from=rdma to="+row.Transport) && !strings.Contains(logs, "had=rdma now="+row.Transport) {
		t.Errorf("the bench's log does not say it moved from rdma to %s:\n%s", row.Transport, logs)
	}

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
	row, logs = bench("2s", 0)
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
