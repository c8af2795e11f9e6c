package directory

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// claimChildEnv tells TestEtcdClaimChild the directory URL and the node
// ID to register.
const claimChildEnv = "XFER_TEST_CLAIM_CHILD"

// TestEtcdClaimChild is the process of TestEtcdRestartTakesOver that
// registers a node, with a lease of 30 s, and says so.
func TestEtcdClaimChild(t *testing.T) {
	v := os.Getenv(claimChildEnv)
	if v == "" {
		t.Skip("the child process of TestEtcdRestartTakesOver")
	}
	url, id, _ := strings.Cut(v, " ")
	d, err := Open(context.Background(), url, Options{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background(), entry(id, "10.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	fmt.Println("registered")
	time.Sleep(time.Hour)
}

// A node killed (SIGKILL: its lease lives on for its TTL, 30 s) and
// started again at once on the same host under the same ID takes the ID
// over at once; a live process that holds an ID, in another process or
// in this one, still refuses the claim with ErrTaken.
func TestEtcdRestartTakesOver(t *testing.T) {
	host := startEtcd(t)
	url := "etcd://" + host + "/" + t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(id string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestEtcdClaimChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), claimChildEnv+"="+url+" "+id)
		cmd.Stderr = os.Stderr
		out := testutil.StartPiped(t, cmd)
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "registered\n" {
			t.Fatalf("the child registering %s: %q, %v", id, line, err)
		}
		return cmd
	}
	d := mustOpen(t, url, 30*time.Second)

	start("live")
	err := d.Register(ctx, entry("live", "10.0.0.2:1"))
	if !errors.Is(err, ErrTaken) || !strings.Contains(err.Error(), "10.0.0.1:1") {
		t.Fatalf("claim of an ID a live process holds: %v, want ErrTaken naming 10.0.0.1:1", err)
	}

	dead := start("restarted")
	if err := dead.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	dead.Wait()
	began := time.Now()
	if err := d.Register(ctx, entry("restarted", "10.0.0.2:1")); err != nil {
		t.Fatalf("claim of the ID of this host's killed process: %v, want it taken over at once", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the takeover took %v", took)
	}
	if got, err := d.Lookup(ctx, "restarted"); err != nil || got.Addrs[0] != "10.0.0.2:1" {
		t.Fatalf("lookup after the takeover: %+v, %v", got, err)
	}
	if r := registration(t, d, "restarted"); r.State != Registered || !r.TookOver {
		t.Fatalf("registration after the takeover: %+v, want registered and TookOver", r)
	}
	if err := d.Register(ctx, entry("fresh", "10.0.0.2:2")); err != nil {
		t.Fatal(err)
	}
	if r := registration(t, d, "fresh"); r.TookOver {
		t.Fatalf("a registration of a free ID: %+v, want TookOver false", r)
	}

	// The new holder lives in this process: another client here is
	// refused.
	other := mustOpen(t, url, 30*time.Second)
	if err := other.Register(ctx, entry("restarted", "10.0.0.3:1")); !errors.Is(err, ErrTaken) {
		t.Fatalf("claim of an ID this process holds, from another client: %v, want ErrTaken", err)
	}
}

// holderGone proves nothing of an entry without an owner, of another
// boot or PID namespace, or of a process that runs (this one).
func TestHolderGone(t *testing.T) {
	me := self()
	if me == nil {
		t.Skip("no /proc")
	}
	for name, o := range map[string]*owner{
		"this process":   me,
		"another boot":   {Boot: "x", PIDNS: me.PIDNS, PID: 1 << 30, Start: 1},
		"another pid ns": {Boot: me.Boot, PIDNS: "pid:[1]", PID: 1 << 30, Start: 1},
		"no pid":         {Boot: me.Boot, PIDNS: me.PIDNS},
	} {
		raw := withOwner(entry("n", "10.0.0.1:1"), nil)
		raw = []byte(strings.Replace(string(raw), string(mustJSON(t, me)), string(mustJSON(t, o)), 1))
		if _, gone := holderGone(raw); gone {
			t.Errorf("%s: holder gone", name)
		}
	}
	if _, gone := holderGone([]byte(`{"node_id":"n","addrs":["10.0.0.1:1"]}`)); gone {
		t.Error("an entry without an owner: holder gone")
	}
	reused := *me
	reused.Start++
	raw := withOwner(entry("n", "10.0.0.1:1"), nil)
	raw = []byte(strings.Replace(string(raw), string(mustJSON(t, me)), string(mustJSON(t, &reused)), 1))
	if _, gone := holderGone(raw); !gone {
		t.Error("a PID now another process's (another start time): holder not gone")
	}
	if _, err := Unmarshal(raw); err != nil {
		t.Errorf("an entry with its owner does not decode: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
