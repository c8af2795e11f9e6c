package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// integrityValue builds a self-checking value: put id, key index, length
// and a CRC of the rest, then bytes derived from the id.
func integrityValue(id uint64, key, n int) []byte {
	v := make([]byte, n)
	binary.LittleEndian.PutUint64(v[0:], id)
	binary.LittleEndian.PutUint64(v[8:], uint64(key))
	binary.LittleEndian.PutUint32(v[16:], uint32(n))
	for i := 24; i < n; i++ {
		v[i] = byte(id) ^ byte(i) ^ byte(i>>8)
	}
	binary.LittleEndian.PutUint32(v[20:], crc32.ChecksumIEEE(v[24:]))
	return v
}

// checkValue returns the id and key a value claims, or an error if it is not
// whole.
func checkValue(v []byte) (id uint64, key int, err error) {
	if len(v) < 24 {
		return 0, 0, fmt.Errorf("value of %d bytes is shorter than its header", len(v))
	}
	id, key = binary.LittleEndian.Uint64(v[0:]), int(binary.LittleEndian.Uint64(v[8:]))
	if n := binary.LittleEndian.Uint32(v[16:]); int(n) != len(v) {
		return id, key, fmt.Errorf("value says %d bytes, got %d", n, len(v))
	}
	if crc := binary.LittleEndian.Uint32(v[20:]); crc != crc32.ChecksumIEEE(v[24:]) {
		return id, key, fmt.Errorf("value of put %d: checksum mismatch (torn or corrupted)", id)
	}
	return id, key, nil
}

// TestIntegrity runs mixed GETs and PUTs from 16 clients over a shared key
// space, with values below and above the inline limit, and checks every GET
// against the PUTs: its value is whole, was stored by the PUT that got the
// version the GET reports, for the same key, and is no older than the last
// PUT of that key that completed before the GET began. 100,000 operations
// per transport (2,000 under the race detector or -short).
func TestIntegrity(t *testing.T) {
	ops := 100_000
	if n, err := strconv.Atoi(os.Getenv("XFER_KV_INTEGRITY_OPS")); err == nil {
		ops = n
	} else if raceEnabled || testing.Short() {
		ops = 2_000
	}
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) { integrity(t, tr, ops) })
	}
}

func integrity(t *testing.T, tr xfer.Policy, ops int) {
	const (
		clients = 16
		keys    = 64
	)
	sizes := []int{24, 200, 4 << 10, DefaultInlineMax, DefaultInlineMax + 1, 64 << 10, 300 << 10}
	s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 64}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	type put struct {
		key int
		id  uint64
	}
	type seen struct {
		key    int
		id     uint64
		ver    uint64
		minVer uint64
	}
	var (
		mu      sync.Mutex
		puts    = map[uint64]put{}    // version → put
		verOf   = map[uint64]uint64{} // put id → version
		maxDone = make([]uint64, keys)
		nextID  uint64
		obs     []seen
	)
	record := func(key int, id, ver uint64) {
		mu.Lock()
		puts[ver] = put{key, id}
		verOf[id] = ver
		maxDone[key] = max(maxDone[key], ver)
		mu.Unlock()
	}
	newID := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		nextID++
		return nextID
	}
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = dial(t, s.addr, tr)
	}
	for k := range keys {
		id := newID()
		ver, err := cs[0].putValue(ctx, fmt.Sprint(k), integrityValue(id, k, 100), putFields{})
		if err != nil {
			t.Fatal(err)
		}
		record(k, id, ver)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w, c := range cs {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			buf, err := c.Engine().Alloc(512 << 10)
			if err != nil {
				errs <- err
				return
			}
			defer c.Engine().Free(buf)
			for range ops / clients {
				k := rng.IntN(keys)
				if rng.IntN(2) == 0 {
					id := newID()
					ver, err := c.putValue(ctx, fmt.Sprint(k), integrityValue(id, k, sizes[rng.IntN(len(sizes))]), putFields{})
					if err != nil {
						errs <- fmt.Errorf("put: %w", err)
						return
					}
					record(k, id, ver)
					continue
				}
				mu.Lock()
				minVer := maxDone[k]
				mu.Unlock()
				n, inline, ver, err := c.get(ctx, fmt.Sprint(k), buf, true, nil)
				if err != nil {
					errs <- fmt.Errorf("get: %w", err)
					return
				}
				v := inline
				if v == nil {
					v = buf.Bytes()[:n]
				}
				id, key, err := checkValue(v)
				if err == nil && key != k {
					err = fmt.Errorf("get of key %d returned a value of key %d", k, key)
				}
				// A GET the server answered with a notification (its
				// value written into buf) reports no version: the checks
				// at the end use the version of the PUT the value names.
				if err == nil && ver != 0 && ver < minVer {
					err = fmt.Errorf("get of key %d returned version %d, older than version %d completed before it began", k, ver, minVer)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				obs = append(obs, seen{k, id, ver, minVer})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mismatches, notified := 0, 0
	for _, o := range obs {
		ver, ok := verOf[o.id]
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("get of key %d saw put %d, which never completed", o.key, o.id)
		case o.ver != 0 && o.ver != ver:
			err = fmt.Errorf("get of key %d reported version %d holding put %d, which got version %d", o.key, o.ver, o.id, ver)
		case puts[ver].key != o.key:
			err = fmt.Errorf("get of key %d saw put %d, of key %d", o.key, o.id, puts[ver].key)
		case ver < o.minVer:
			err = fmt.Errorf("get of key %d saw version %d, older than version %d completed before it began", o.key, ver, o.minVer)
		}
		if o.ver == 0 {
			notified++
		}
		if err != nil {
			mismatches++
			if mismatches < 5 {
				t.Error(err)
			}
		}
	}
	st := s.Snapshot()
	t.Logf("%s: %d operations checked (%d gets, %d of them answered by a notification; %d puts), %d mismatches; %d evictions", tr, len(obs)+len(puts)-keys, len(obs), notified, len(puts)-keys, mismatches, st.Evictions)
	if mismatches > 0 {
		t.Fatalf("%d mismatches", mismatches)
	}
	if notified == 0 {
		t.Fatal("no GET was answered by a notification: the test missed that path")
	}
	if st.Evictions > 0 {
		t.Fatalf("%d evictions: the pool is too small for the test, which then cannot check every GET", st.Evictions)
	}
}

// TestClientDiesMidPut kills a client while the server is reading its
// value: the slot is freed, nothing partial becomes visible, and the key
// keeps its previous, whole value.
func TestClientDiesMidPut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a client process")
	}
	s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 64}})
	ctx := ctxT(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "XFER_KV_PUT_LOOP="+s.addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
		}
		cmd.Wait()
	}()
	waitFor(t, 20*time.Second, "the first value", func() bool { return s.Snapshot().Keys == 1 })
	caught := false
	for i := 0; i < 500 && !caught; i++ {
		testutil.Pause(t, cmd.Process)
		time.Sleep(2 * time.Millisecond)
		st := s.Snapshot()
		if st.PoolUsed > roundUp(st.ValueBytes) {
			// A PUT holds a slot. It is caught in the middle only if the
			// server is still waiting for the stopped client's value: a
			// PUT whose value had all arrived commits meanwhile, and then
			// nothing would be aborted.
			time.Sleep(200 * time.Millisecond)
			again := s.Snapshot()
			if again.PoolUsed > roundUp(again.ValueBytes) && again.DataPlaneBytes == st.DataPlaneBytes && again.Puts == st.Puts {
				caught = true // kill the client now
				cmd.Process.Kill()
				killed = true
				break
			}
		}
		cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	}
	if !caught {
		t.Fatal("never caught the client in the middle of a PUT")
	}
	var last Stats
	waitFor(t, 20*time.Second, "the aborted PUT's slot to be freed", func() bool {
		last = s.Snapshot()
		return last.PoolUsed == roundUp(last.ValueBytes) && last.AbortedPuts >= 1
	}, func() string { return fmt.Sprintf("%+v", last) })
	c := dial(t, s.addr, xfer.PolicyTCP)
	v, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != putLoopSize || bytes.Count(v, v[:1]) != len(v) {
		t.Fatalf("value after the client died: %d bytes, %d equal to the first", len(v), bytes.Count(v, v[:1]))
	}
	if st := s.Snapshot(); st.Keys != 1 {
		t.Fatalf("%d keys", st.Keys)
	}
}

// waitFor waits until cond holds, for at most d; on a timeout it fails t,
// with what each of state (if any) describes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			msg := "timed out waiting for " + what
			for _, f := range state {
				msg += "; " + f()
			}
			t.Fatal(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
