package main

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
	"github.com/xferio/xfer/mooncake"
)

// openNamed opens an engine named name through the metadata server meta.
func openNamed(t testing.TB, name, meta string) *mcEngine {
	t.Helper()
	h, err := mcOpen(name, meta, "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mcClose(h) })
	m, done, err := useMC(h)
	if err != nil {
		t.Fatal(err)
	}
	done()
	return m
}

// metadataServer starts Mooncake's HTTP metadata server on loopback.
func metadataServer(t *testing.T, o mooncake.ServerOptions) (*mooncake.Server, string) {
	s := mooncake.NewServer(o)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs.URL + mooncake.MetadataPath
}

// roundTrip writes to and reads back from the segment seg through init.
func roundTrip(t *testing.T, target, init *mcEngine, seg string) {
	t.Helper()
	remote, local := mmapped(t, 1<<14), mmapped(t, 1<<14)
	if err := target.register([]unsafe.Pointer{ptr(remote)}, []int64{int64(len(remote))}, false); err != nil {
		t.Fatal(err)
	}
	if err := init.register([]unsafe.Pointer{ptr(local)}, []int64{int64(len(local))}, false); err != nil {
		t.Fatal(err)
	}
	first, err := init.firstBuffer(seg)
	if err != nil || first != uint64(uintptr(ptr(remote))) {
		t.Fatalf("first buffer of %s: %#x, %v", seg, first, err)
	}
	if own, err := init.firstBuffer(init.segment); err != nil || own != uint64(uintptr(ptr(local))) {
		t.Fatalf("first buffer of its own segment %s: %#x, %v", init.segment, own, err)
	}
	copy(local, bytes.Repeat([]byte("moon"), 1024))
	codes := make([]int32, 1)
	if err := init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), first + 64, 4096}}, codes, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(remote[64:64+4096], local[:4096]) {
		t.Fatal("WRITE through the metadata server: the target's memory differs")
	}
	if err := init.transferSync(seg, xfer.OpRead, []mcXfer{{ptr(local[8192:]), first + 64, 4096}}, codes, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local[8192:8192+4096], local[:4096]) {
		t.Fatal("READ through the metadata server: differs")
	}
}

// TestMCHTTPMetadata: two engines named by any name find each other
// through Mooncake's HTTP metadata server; an unknown name is
// ERR_METADATA; closing an engine removes its entry.
func TestMCHTTPMetadata(t *testing.T) {
	t.Setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1") // names that do not resolve
	srv, url := metadataServer(t, mooncake.ServerOptions{})
	target := openNamed(t, "prefill-0", url)
	init := openNamed(t, "127.0.0.1:12347", url)
	if target.segment != "prefill-0" || init.segment != "127.0.0.1:12347" {
		t.Fatalf("segments %q and %q: want the local hostnames", target.segment, init.segment)
	}
	if srv.Len() != 2 {
		t.Fatalf("%d keys on the server, want 2 rpc_meta entries", srv.Len())
	}
	roundTrip(t, target, init, "prefill-0")
	codes := make([]int32, 1)
	local := mmapped(t, 4096)
	if err := init.register([]unsafe.Pointer{ptr(local)}, []int64{4096}, false); err != nil {
		t.Fatal(err)
	}
	err := init.transferSync("decode-9", xfer.OpWrite, []mcXfer{{ptr(local), 4096, 16}}, codes, nil)
	if mcCodeOf(err) != mcErrMetadata || !strings.Contains(err.Error(), "decode-9") {
		t.Errorf("an unknown segment: %v (code %d), want ERR_METADATA naming it", err, mcCodeOf(err))
	}
	// A second engine under a name in use is refused, as by Mooncake's server.
	if h, err := mcOpen("prefill-0", url, "tcp", ""); mcCodeOf(err) != mcErrMetadata {
		mcClose(h)
		t.Errorf("a second engine named prefill-0: %v (code %d)", err, mcCodeOf(err))
	}
	// Closed, the name is free again.
	h, err := mcOpen("decode-0", url, "tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := mcClose(h); err != nil {
		t.Fatal(err)
	}
	if srv.Len() != 2 {
		t.Errorf("%d keys after an engine closed, want 2", srv.Len())
	}
	openNamed(t, "decode-0", url)
}

// TestMCHTTPMetadataToken: with MC_METADATA_HTTP_TOKEN, an engine sends
// the token; without it, initialize fails with ERR_METADATA.
func TestMCHTTPMetadataToken(t *testing.T) {
	_, url := metadataServer(t, mooncake.ServerOptions{Token: "meta-token"})
	t.Setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
	t.Setenv("MC_METADATA_HTTP_TOKEN", "")
	if h, err := mcOpen("a", url, "tcp", ""); mcCodeOf(err) != mcErrMetadata || !strings.Contains(err.Error(), "401") {
		mcClose(h)
		t.Fatalf("without the token: %v (code %d)", err, mcCodeOf(err))
	}
	t.Setenv("MC_METADATA_HTTP_TOKEN", "meta-token")
	target := openNamed(t, "a", url)
	init := openNamed(t, "b", url)
	roundTrip(t, target, init, "a")
}

// TestMCEtcdMetadata: the same through an etcd, named etcd://HOST:PORT
// and as a bare HOST:PORT.
func TestMCEtcdMetadata(t *testing.T) {
	t.Setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
	host := etcdtest.Start(t)
	target := openNamed(t, "node-a", "etcd://"+host)
	init := openNamed(t, "node-b", host)
	roundTrip(t, target, init, "node-a")
	st, err := mooncake.OpenStore(context.Background(), host, mooncake.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := mooncake.ResolveRPCMeta(context.Background(), st, "node-a")
	if err != nil || m.Port != target.port || m.Host != "127.0.0.1" {
		t.Fatalf("node-a's entry in etcd: %+v, %v (port %d)", m, err, target.port)
	}
	if h, err := mcOpen("node-c", "etcd://127.0.0.1:1", "tcp", ""); mcCodeOf(err) != mcErrMetadata {
		mcClose(h)
		t.Errorf("an etcd that is not there: %v (code %d)", err, mcCodeOf(err))
	}
}

// TestMCSecret: with XFER_SECRET (or XFER_SECRET_FILE), engines with the
// same secret move data; one without it is refused in the handshake.
func TestMCSecret(t *testing.T) {
	secret, err := xfer.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XFER_SECRET", "")
	t.Setenv("XFER_SECRET_FILE", file)
	target, seg := openMC(t)
	t.Setenv("XFER_SECRET_FILE", "")
	t.Setenv("XFER_SECRET", secret)
	init, _ := openMC(t)
	roundTrip(t, target, init, seg)

	t.Setenv("XFER_SECRET", "")
	outsider, _ := openMC(t)
	if _, err := outsider.firstBuffer(seg); !errors.Is(err, xfer.ErrAuth) {
		t.Errorf("an engine without the secret: %v, want ErrAuth", err)
	}
	t.Setenv("XFER_SECRET", "short")
	if h, err := mcOpen("127.0.0.1", "P2PHANDSHAKE", "tcp", ""); err == nil || !strings.Contains(err.Error(), "secret") {
		mcClose(h)
		t.Errorf("a secret too short: %v", err)
	}
}

// TestMCListenHost: where an engine with a metadata server listens.
func TestMCListenHost(t *testing.T) {
	t.Setenv("MC_TCP_BIND_ADDRESS", "")
	for in, want := range map[string]string{"127.0.0.1": "127.0.0.1", "::1": "::1", "localhost": "localhost"} {
		if got, err := listenHost(in); err != nil || got != want {
			t.Errorf("listenHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	t.Setenv("MC_TCP_BIND_ADDRESS", "127.0.0.2")
	if got, err := listenHost("prefill-0"); err != nil || got != "127.0.0.2" {
		t.Errorf("with MC_TCP_BIND_ADDRESS: %q, %v", got, err)
	}
	t.Setenv("MC_TCP_BIND_ADDRESS", "0.0.0.0")
	_, url := metadataServer(t, mooncake.ServerOptions{})
	if h, err := mcOpen("x", url, "tcp", ""); mcCodeOf(err) != mcErrInvalid || !strings.Contains(err.Error(), "unspecified") {
		mcClose(h)
		t.Errorf("publishing 0.0.0.0: %v", err)
	}
}
