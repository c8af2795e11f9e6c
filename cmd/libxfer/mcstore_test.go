package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/masterdata"
)

// startMaster runs a master on loopback for the test, with its data
// plane when data is set; its address.
func startMaster(t testing.TB, data bool) string {
	t.Helper()
	o := master.Options{Logger: slog.New(slog.DiscardHandler)}
	var e *xfer.Engine
	if data {
		var err error
		if e, err = xfer.Open(context.Background(), xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 1}); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(e.Addr())
		o.DataPort, _ = strconv.Atoi(port)
	}
	s := master.New(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.NewGRPCServer("")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { defer func() { done <- struct{}{} }(); g.Serve(l) }()
	if e != nil {
		go func() { defer func() { done <- struct{}{} }(); masterdata.Serve(ctx, e, s, nil) }()
	}
	t.Cleanup(func() {
		cancel()
		g.Stop()
		<-done
		if e != nil {
			e.Close()
			<-done
		}
		s.Close()
	})
	return l.Addr().String()
}

// openStore sets a store client up against the master at addr.
func openStore(t testing.TB, addr, protocol string, segment, local int64) *mcStore {
	t.Helper()
	return openStoreOn(t, "127.0.0.1", "", addr, protocol, segment, local)
}

// openStoreOn sets a store client up on host (and device dev, for rdma).
func openStoreOn(t testing.TB, host, dev, addr, protocol string, segment, local int64) *mcStore {
	t.Helper()
	doc, _ := json.Marshal(storeConfig{LocalHostname: host, MetadataServer: "P2PHANDSHAKE", RDMADevices: dev,
		GlobalSegmentSize: segment, LocalBufferSize: local, Protocol: protocol, MasterServerAddr: addr})
	h, err := storeOpen(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storeClose(h) })
	s, done, err := useStore(h)
	if err != nil {
		t.Fatal(err)
	}
	done()
	return s
}

func TestStorePutGet(t *testing.T) {
	for _, c := range []struct {
		proto string
		data  bool
	}{{"tcp", false}, {"tcp", true}, {"shm", true}} {
		proto := c.proto
		addr := startMaster(t, c.data)
		t.Run(fmt.Sprintf("%s/data=%v", proto, c.data), func(t *testing.T) {
			a := openStore(t, addr, proto, 8<<20, 8<<20)
			b := openStore(t, addr, proto, 8<<20, 8<<20)
			cfg := &replicateConfig{ReplicaNum: 1, PreferredSegment: b.hostname}
			val := bytes.Repeat([]byte("mooncake"), 4096)
			key := "k-" + proto
			if err := a.put(key, unsafe.Pointer(unsafe.SliceData(val)), int64(len(val)), cfg, true, false); err != nil {
				t.Fatal(err)
			}
			p, n, tok, err := a.get(key)
			if err != nil || n != int64(len(val)) || !bytes.Equal(unsafe.Slice((*byte)(p), n), val) {
				t.Fatalf("get: %d bytes, %v", n, err)
			}
			if err := a.release(tok); err != nil {
				t.Fatal(err)
			}
			if err := a.release(tok); storeCode(err) != scInvalidParams {
				t.Fatalf("a second release: %v", err)
			}
			if _, _, _, err := a.get("absent"); storeCode(err) != scNotFound {
				t.Fatalf("get of an absent key: %v (code %d)", err, storeCode(err))
			}
			if (a.data.Load() != nil) != c.data {
				t.Fatalf("the data plane's client: %v, want one: %v", a.data.Load(), c.data)
			}
		})
	}
}

// TestStoreRDMA puts and gets between two clients whose engines move
// the bytes over rdma only (make verbs-test runs it in the VM, on rxe and
// on siw): a value of 1 MiB with two replicas, read back from each
// client, and one read after its holder closed.
func TestStoreRDMA(t *testing.T) {
	dev := testutil.RequireDevice(t)
	host := testutil.RequireRDMAAddr(t).String()
	addr := startMaster(t, true)
	a := openStoreOn(t, host, dev, addr, "rdma", 8<<20, 8<<20)
	b := openStoreOn(t, host, dev, addr, "rdma", 8<<20, 8<<20)
	c := openStoreOn(t, host, dev, addr, "rdma", 8<<20, 8<<20)
	val := bytes.Repeat([]byte("rdma"), 1<<18)
	cfg := &replicateConfig{ReplicaNum: 2, PreferredSegments: []string{b.hostname, c.hostname}}
	if err := a.put("k", unsafe.Pointer(unsafe.SliceData(val)), int64(len(val)), cfg, true, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*mcStore{a, b, c} {
		p, n, tok, err := s.get("k")
		if err != nil || !bytes.Equal(unsafe.Slice((*byte)(p), n), val) {
			t.Fatalf("get from %s: %d bytes, %v", s.hostname, n, err)
		}
		s.release(tok)
	}
	for _, s := range []*mcStore{a, b, c} {
		for _, mp := range s.m.peers {
			if got := mp.p.Transport(); got != "rdma" {
				t.Fatalf("%s reached a segment over %s", s.hostname, got)
			}
		}
	}
	storeClose(b.handle(t))
	p, n, tok, err := a.get("k")
	if err != nil || !bytes.Equal(unsafe.Slice((*byte)(p), n), val) {
		t.Fatalf("get once a replica's holder closed: %d bytes, %v", n, err)
	}
	a.release(tok)
}

// handle is s's handle.
func (s *mcStore) handle(t testing.TB) int64 {
	storeMu.Lock()
	defer storeMu.Unlock()
	for h, o := range stores {
		if o == s {
			return h
		}
	}
	t.Fatal("a store without a handle")
	return 0
}

// BenchmarkStoreGet4K times a 4 KiB get between two clients of one
// process, from a goroutine: the store's floor under the Python call.
func BenchmarkStoreGet4K(b *testing.B) {
	for _, data := range []bool{false, true} {
		b.Run(fmt.Sprintf("data=%v", data), func(b *testing.B) { benchGet4K(b, data) })
	}
}

func benchGet4K(b *testing.B, data bool) {
	addr := startMaster(b, data)
	a := openStore(b, addr, "tcp", 8<<20, 8<<20)
	h := openStore(b, addr, "tcp", 8<<20, 8<<20)
	cfg := &replicateConfig{ReplicaNum: 1, PreferredSegment: h.hostname}
	val := bytes.Repeat([]byte("x"), 4096)
	if err := a.put("k", unsafe.Pointer(unsafe.SliceData(val)), 4096, cfg, true, false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		_, _, tok, err := a.get("k")
		if err != nil {
			b.Fatal(err)
		}
		a.release(tok)
	}
}

// BenchmarkStoreLookup times the master's GetReplicaList alone.
func BenchmarkStoreLookup(b *testing.B) {
	for _, data := range []bool{false, true} {
		b.Run(fmt.Sprintf("data=%v", data), func(b *testing.B) { benchLookup(b, data) })
	}
}

func benchLookup(b *testing.B, data bool) {
	addr := startMaster(b, data)
	a := openStore(b, addr, "tcp", 8<<20, 8<<20)
	val := bytes.Repeat([]byte("x"), 4096)
	if err := a.put("k", unsafe.Pointer(unsafe.SliceData(val)), 4096, nil, true, false); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B) {
		for b.Loop() {
			if _, _, err := a.lookup([]string{"k"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("goroutine", run)
	b.Run("locked", func(b *testing.B) { // as a call through the C ABI runs
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		run(b)
	})
}

// FuzzParseReplicate: any document is a checked config or an
// INVALID_PARAMS error, never a panic.
func FuzzParseReplicate(f *testing.F) {
	f.Add([]byte(`{"replica_num":2,"with_soft_pin":true,"soft_pin_ttl_ms":1000,"preferred_segment":"h:1"}`))
	f.Add([]byte(`{"replica_num":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := parseReplicate(doc)
		if err != nil {
			if storeCode(err) != scInvalidParams {
				t.Fatalf("%q: %v (code %d)", doc, err, storeCode(err))
			}
			return
		}
		pb, err := c.pb()
		if err != nil || pb.ReplicaNum < 1 || pb.ReplicaNum > storeMaxReplicas {
			t.Fatalf("%q: accepted as %v, %v", doc, pb, err)
		}
	})
}

// FuzzParseStoreConfig: any setup document is a checked config or an
// INVALID_PARAMS error, never a panic.
func FuzzParseStoreConfig(f *testing.F) {
	f.Add([]byte(`{"local_hostname":"localhost","metadata_server":"P2PHANDSHAKE","global_segment_size":16777216,` +
		`"local_buffer_size":16777216,"protocol":"tcp","master_server_addr":"127.0.0.1:50051"}`))
	f.Add([]byte(`{"master_server_addr":"etcd://127.0.0.1:2379;127.0.0.1:2380"}`))
	f.Add([]byte(`{"global_segment_size":-1}`))
	f.Add([]byte(`{"metadata_server":"http://127.0.0.1:8080/metadata"}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, etcd, err := parseStoreConfig(doc)
		if err != nil {
			if storeCode(err) != scInvalidParams {
				t.Fatalf("%q: %v (code %d)", doc, err, storeCode(err))
			}
			return
		}
		if c.GlobalSegmentSize < 0 || c.LocalBufferSize < 0 || c.Protocol == "" || (etcd == nil && c.MasterServerAddr == "") {
			t.Fatalf("%q: accepted as %+v", doc, c)
		}
	})
}

// TestMCEngineRDMA moves a sync batch, an async one and a READ between two
// TransferEngines over rdma only (make verbs-test runs it in the VM, on
// rxe and on siw), with a notification after the data.
func TestMCEngineRDMA(t *testing.T) {
	dev := testutil.RequireDevice(t)
	host := testutil.RequireRDMAAddr(t).String()
	open := func() *mcEngine {
		h, err := mcOpen(host, "P2PHANDSHAKE", "rdma", dev)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mcClose(h) })
		m, done, _ := useMC(h)
		done()
		return m
	}
	target, init := open(), open()
	remote, err := target.allocManaged(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	local, err := init.allocManaged(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	lb := init.managedBytes(local)
	for i := range lb {
		lb[i] = byte(i * 7)
	}
	seg := target.segment
	codes := make([]int32, 2)
	half := int64(1 << 19)
	xs := []mcXfer{{unsafe.Pointer(&lb[0]), uint64(remote), half}, {unsafe.Pointer(&lb[half]), uint64(remote) + uint64(half), half}}
	if err := init.transferSync(seg, xfer.OpWrite, xs, codes, &mcNotify{Name: "init", Msg: "done"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(target.managedBytes(remote), lb) {
		t.Fatal("the WRITE's bytes differ")
	}
	clear(lb[:4096])
	id, err := init.submit(seg, xfer.OpRead, []mcXfer{{unsafe.Pointer(&lb[0]), uint64(remote) + 4096, 4096}})
	if err != nil {
		t.Fatal(err)
	}
	if err := init.wait(id, codes[:1]); err != nil || !bytes.Equal(lb[:4096], target.managedBytes(remote)[4096:8192]) {
		t.Fatalf("the async READ: %v", err)
	}
	for _, mp := range init.peers {
		if got := mp.p.Transport(); got != "rdma" {
			t.Fatalf("the segment was reached over %s", got)
		}
	}
}
