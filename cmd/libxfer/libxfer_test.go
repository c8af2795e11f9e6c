package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/xferio/xfer/config"
	"github.com/xferio/xfer/connector"
)

func TestGuard(t *testing.T) {
	call := func() (err error) {
		defer guard("put", &err)
		var m map[string]int
		m["boom"] = 1 // a nil map: panics
		return nil
	}
	err := call()
	if err == nil || !strings.Contains(err.Error(), "libxfer: put: internal error") || codeOf(err) != CodeInternal {
		t.Errorf("a panic under guard: %v (code %d), want an internal error", err, codeOf(err))
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig([]byte(`{"role":"producer","listen":"127.0.0.1:0","transport":"tcp","memory_mb":8,"memory_device":"cuda:1","ttl_seconds":-1,"device":"rxe0","producer":"h:1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Role != connector.RoleProducer || cfg.Engine.Listen != "127.0.0.1:0" || cfg.Engine.MemoryMB != 8 || cfg.TTL >= 0 ||
		cfg.Engine.RDMA.Device != "rxe0" || cfg.Producer != "h:1" || string(cfg.Engine.Transport) != "tcp" ||
		cfg.Engine.MemoryDevice.String() != "cuda:1" {
		t.Errorf("parsed %+v", cfg)
	}
	// A Get through the ABI spins before its thread sleeps, unless told.
	if cfg.WaitSpin != connector.ThreadWaitSpin {
		t.Errorf("wait_spin by default: %v, want %v", cfg.WaitSpin, connector.ThreadWaitSpin)
	}
	for doc, want := range map[string]time.Duration{`{"wait_spin":"20us"}`: 20 * time.Microsecond, `{"wait_spin":"-1ns"}`: -1} {
		if cfg, err := parseConfig([]byte(doc)); err != nil || cfg.WaitSpin != want {
			t.Errorf("%s: wait_spin %v, %v; want %v", doc, cfg.WaitSpin, err, want)
		}
	}
	for _, bad := range []string{
		``, `[]`, `{"role":"sender"}`, `{"wait_spin":"soon"}`, `{"wait_spin":50}`, `{"transport":"udp"}`, `{"memory_mb":-1}`, `{"chunk_size":-5}`,
		`{"pull":"push"}`, `{"nope":1}`, `{} {}`, `{"ttl_seconds":1e300}`, `{"memory_device":"tpu:0"}`,
		`{"device":"a","rdma_device":"b"}`, `{"conns":-1}`, `{"role":"producer","role":"consumer"}`, `{"log_format":"xml"}`,
	} {
		if _, err := parseConfig([]byte(bad)); codeOf(err) != CodeInvalid {
			t.Errorf("config %q: %v (code %d), want CodeInvalid", bad, err, codeOf(err))
		}
	}
}

// The JSON takes the config file's document: every engine key, flat or
// nested, beside the connector's own keys.
func TestParseConfigEngineKeys(t *testing.T) {
	for _, doc := range []string{
		`{"role":"consumer","conns":3,"rdma_gid_index":1,"rdma_use_cm":true,"handshake_timeout":"2s","log_level":"debug"}`,
		`{"role":"consumer","tcp":{"conns":3},"rdma":{"gid_index":1,"use_cm":true},"handshake_timeout":"2s","log_level":"debug"}`,
	} {
		cfg, err := parseConfig([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		n, ok := cfg.Engine.RDMA.GIDIndex.Index()
		if cfg.Role != connector.RoleConsumer || cfg.Engine.TCP.Conns != 3 || !ok || n != 1 || !cfg.Engine.RDMA.UseCM ||
			cfg.Engine.HandshakeTimeout != 2*time.Second || cfg.Logger == nil || !cfg.Logger.Enabled(t.Context(), slog.LevelDebug) {
			t.Errorf("%s: parsed %+v", doc, cfg)
		}
	}
	// Every key of the document is known to the ABI (null: its default).
	for _, k := range config.Keys(config.Library) {
		for _, name := range []string{k.Flat, k.Name} {
			doc := fmt.Sprintf(`{%q:null}`, name)
			if k.Section == "" && name != k.Flat {
				continue // an alias (device): its canonical name is another key's
			}
			if k.Section != "" && name == k.Name {
				doc = fmt.Sprintf(`{%q:{%q:null}}`, k.Section, k.Sub)
			}
			if _, err := parseConfig([]byte(doc)); err != nil {
				t.Errorf("key %s: %s: %v", k.Name, doc, err)
			}
		}
	}
}

// A refused document names every unknown key with its line, and says
// where a misplaced one belongs.
func TestParseConfigErrors(t *testing.T) {
	_, err := parseConfig([]byte("{\"role\": \"producer\",\n \"conn\": 3,\n \"gid_index\": 1,\n \"metrics_listen\": \":9464\"}"))
	for _, want := range []string{
		"libxfer: config:2: unknown key \"conn\": did you mean conns?\n",
		"config:3: unknown key \"gid_index\": it belongs in rdma: {gid_index: ...}, or rdma_gid_index at the top level\n",
		"config:4: unknown key \"metrics_listen\": metrics_listen is a key of the xfer command's config file",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\nwant it to contain %q", err, want)
		}
	}
	if codeOf(err) != CodeInvalid || !errors.Is(err, config.ErrUnknownKey) {
		t.Errorf("error %v: code %d", err, codeOf(err))
	}
	_, err = parseConfig([]byte(`{"rdma":{"mtu":9000}}`))
	if codeOf(err) != CodeInvalid || !strings.Contains(err.Error(), "rdma.mtu 9000") {
		t.Errorf("mtu 9000: %v", err)
	}
}

func TestObjectRoundTrip(t *testing.T) {
	in := `{"a":[1,-2,2.5,"s",null,true,false],"big":18446744073709551615,"min":-9223372036854775808,"nested":{"k":{}}}`
	raw, err := objectFromJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, pickled, err := objectToJSON(raw)
	if err != nil || pickled {
		t.Fatalf("objectToJSON: %v (pickled %v)", err, pickled)
	}
	var a, b any
	json.Unmarshal([]byte(in), &a)
	json.Unmarshal(out, &b)
	if !jsonEqual(a, b) || !strings.Contains(string(out), "18446744073709551615") {
		t.Errorf("round trip: %s, want %s", out, in)
	}
	// A Go producer's struct reads as a map.
	raw, _ = connector.EncodeObject(struct {
		Temperature float64
		Stop        []string
	}{0.7, []string{"</s>"}})
	out, _, err = objectToJSON(raw)
	if err != nil || string(out) != `{"Stop":["</s>"],"Temperature":0.7}` {
		t.Errorf("a Go struct: %s, %v", out, err)
	}
	// Pickles travel tagged and come back as they went.
	raw, _ = objectFromPickle([]byte("\x80\x04pickle"))
	out, pickled, err = objectToJSON(raw)
	if err != nil || !pickled || string(out) != "\x80\x04pickle" {
		t.Errorf("pickle: %q %v %v", out, pickled, err)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestObjectNotPlain(t *testing.T) {
	for _, bad := range []string{`{`, `1 2`, `123456789012345678901234567890`, strings.Repeat("[", 70) + strings.Repeat("]", 70)} {
		if _, err := objectFromJSON([]byte(bad)); !errors.Is(err, errObject) {
			t.Errorf("JSON %.20q: %v, want errObject", bad, err)
		}
	}
	for _, v := range []any{map[int]string{1: "a"}, []byte("raw"), map[string]any{"b": []byte{1}}} {
		raw, err := connector.EncodeObject(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := objectToJSON(raw); codeOf(err) != CodeObject {
			t.Errorf("%T: %v, want CodeObject", v, err)
		}
	}
	if _, _, err := objectToJSON([]byte{0xff}); codeOf(err) != CodeObject {
		t.Errorf("malformed CBOR: %v, want CodeObject", err)
	}
}

// TestHandles runs the ABI's operations (less the C conversions) on two
// real connectors over tcp on loopback.
func TestHandles(t *testing.T) {
	ph, err := openConn([]byte(`{"role":"producer","listen":"127.0.0.1:0","transport":"tcp","memory_mb":4}`))
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(ph)
	ch, err := openConn([]byte(`{"role":"consumer","transport":"tcp","memory_mb":4}`))
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(ch)

	data := []byte{1, 0, 0, 0, 2, 0, 0, 0}
	m, err := put(ph, "a", "b", "t", kindTensor, "int32", []int64{2}, data, putOptions{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	mj, _ := metaJSON(m)
	bh, gm, err := get(ch, "a", "b", "t", mj, 10000, false)
	if err != nil {
		t.Fatal(err)
	}
	p, n, err := bufferData(bh)
	if err != nil || n != 8 || !bytes.Equal(unsafe.Slice((*byte)(p), n), data) || gm.DType != connector.I32 {
		t.Errorf("got %d bytes %v, meta %+v: %v", n, p, gm, err)
	}
	if err := releaseBuffer(bh); err != nil {
		t.Error(err)
	}
	if _, _, err := bufferData(bh); codeOf(err) != CodeReleased {
		t.Errorf("data of a released buffer: %v, want CodeReleased", err)
	}
	if err := releaseBuffer(bh); err != nil {
		t.Errorf("second release: %v", err)
	}

	// An object, zero copy and the errors.
	m, err = put(ph, "a", "b", "o", kindObject, "", nil, []byte(`{"x":[1,2]}`), putOptions{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	mj, _ = metaJSON(m)
	bh, _, err = get(ch, "a", "b", "o", mj, 10000, false)
	if err != nil {
		t.Fatal(err)
	}
	if js, _, err := bufferObject(bh); err != nil || string(js) != `{"x":[1,2]}` {
		t.Errorf("object: %s %v", js, err)
	}
	releaseBuffer(bh)
	ah, err := alloc(ph, "", nil, 100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := putBuffer(ch, ah, "a", "b", "z", putOptions{}, 1000); codeOf(err) != CodeInvalid {
		t.Errorf("put_buffer through another connector: %v, want CodeInvalid", err)
	}
	if _, err := putBuffer(ph, ah, "a", "b", "z", putOptions{}, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := putBuffer(ph, ah, "a", "b", "z", putOptions{}, 1000); codeOf(err) != CodeReleased {
		t.Errorf("second put_buffer: %v, want CodeReleased", err)
	}
	if _, _, err := get(ch, "a", "b", "nope", []byte(`{"producer":"`+mustAddr(t, ph)+`"}`), 10000, true); codeOf(err) != CodeNotFound {
		t.Errorf("get of a missing key: %v, want CodeNotFound", err)
	}
	if _, err := put(ph, "a/x", "b", "k", kindBytes, "", nil, nil, putOptions{}, 0); codeOf(err) != CodeInvalid {
		t.Errorf("a stage with '/': %v, want CodeInvalid", err)
	}
	if _, err := put(ph, "a", "b", "k", 9, "", nil, nil, putOptions{}, 0); codeOf(err) != CodeInvalid {
		t.Errorf("kind 9: %v, want CodeInvalid", err)
	}
	if _, err := put(ph, "a", "b", "k", kindBytes, "", nil, make([]byte, 5<<20), putOptions{}, 0); codeOf(err) != CodeTooLarge {
		t.Errorf("5 MiB into 4: %v, want CodeTooLarge", err)
	}
	if _, err := put(ch, "a", "b", "k", kindBytes, "", nil, []byte("x"), putOptions{}, 0); codeOf(err) != CodeRole {
		t.Errorf("a consumer's put: %v, want CodeRole", err)
	}
	if _, _, err := get(ch, "a", "b", "", nil, 0, true); codeOf(err) != CodeInvalid {
		t.Errorf("get of an empty key: %v, want CodeInvalid", err)
	}
	if _, err := cleanup(ph, "a", "b/c", "k"); codeOf(err) != CodeInvalid {
		t.Errorf("cleanup with a stage with '/': %v, want CodeInvalid", err)
	}
	if _, err := put(ph, "a", "b", "k", kindBytes, "", nil, nil, putOptions{consumers: -1}, 0); codeOf(err) != CodeInvalid {
		t.Errorf("put for -1 consumers: %v, want CodeInvalid", err)
	}
	ah, err = alloc(ph, "", nil, 8, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := putBuffer(ph, ah, "a", "b", "k", putOptions{consumers: -1}, 0); codeOf(err) != CodeInvalid {
		t.Errorf("put_buffer for -1 consumers: %v, want CodeInvalid", err)
	}
	if _, n, err := bufferData(ah); err != nil || n != 8 {
		t.Errorf("a buffer whose put_buffer was refused: %d bytes, %v; want it still live", n, err)
	}
	releaseBuffer(ah)
	m, err = put(ph, "a", "b", "last", kindBytes, "", nil, []byte("abc"), putOptions{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	mj, _ = metaJSON(m)
	bh2, _, err := get(ch, "a", "b", "last", mj, 10000, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := closeConn(ch); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bufferData(bh2); codeOf(err) != CodeReleased {
		t.Errorf("a buffer after its connector's close: %v, want CodeReleased", err)
	}
	if err := closeConn(ch); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := health(ch); codeOf(err) != CodeClosed {
		t.Errorf("health of a closed handle: %v, want CodeClosed", err)
	}
	if _, err := put(ch, "a", "b", "k", kindBytes, "", nil, []byte("x"), putOptions{}, 0); codeOf(err) != CodeClosed {
		t.Errorf("put through a closed handle: %v, want CodeClosed", err)
	}
}

func mustAddr(t *testing.T, h int64) string {
	b, err := health(h)
	if err != nil {
		t.Fatal(err)
	}
	var hl connector.Health
	json.Unmarshal(b, &hl)
	return hl.Addr
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"role":"producer","listen":"127.0.0.1:0","transport":"tcp","memory_mb":8}`))
	f.Add([]byte(`{"ttl_seconds":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseConfig(b); err != nil && codeOf(err) != CodeInvalid {
			t.Fatalf("%q: %v: not CodeInvalid", b, err)
		}
	})
}

func FuzzParseMeta(f *testing.F) {
	f.Add([]byte(`{"producer":"127.0.0.1:1","key":"a/b/k","size":8,"kind":2,"dtype":"F32","shape":[2]}`))
	f.Add([]byte(`{"producer":"h:1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeta(b)
		if err == nil && m.Kind != 0 && m.Check() != nil {
			t.Fatalf("%q: accepted an inconsistent Meta %+v", b, m)
		}
	})
}

func FuzzObjectFromJSON(f *testing.F) {
	f.Add([]byte(`{"a":[1,2.5,"s",null,true]}`))
	f.Add([]byte(`18446744073709551615`))
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, err := objectFromJSON(b)
		if err != nil {
			return
		}
		// What is put can be got.
		if _, _, err := objectToJSON(raw); err != nil {
			t.Fatalf("%q: encoded, but does not decode: %v", b, err)
		}
	})
}

func FuzzObjectToJSON(f *testing.F) {
	raw, _ := objectFromJSON([]byte(`{"a":[1,2.5,"s",null,true]}`))
	f.Add(raw)
	raw, _ = objectFromPickle([]byte("p"))
	f.Add(raw)
	f.Fuzz(func(t *testing.T, b []byte) {
		out, pickled, err := objectToJSON(b)
		if err != nil || pickled {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%x: invalid JSON %q", b, out)
		}
	})
}

// TestCloseUnderCalls checks the order closeConn keeps: a get waiting
// when the connector closes returns (closed), and no call starts on it
// after; stopConn leaves a buffer's memory readable until closeConn; and
// health carries the pool's address, whose memory a buffer is in.
func TestCloseUnderCalls(t *testing.T) {
	ph, err := openConn([]byte(`{"role":"producer","listen":"127.0.0.1:0","transport":"tcp","memory_mb":4}`))
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(ph)
	hj, err := health(ph)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Addr     string `json:"addr"`
		PoolAddr uint64 `json:"pool_addr"`
		PoolSize int64  `json:"pool_bytes"`
	}
	if err := json.Unmarshal(hj, &h); err != nil || h.PoolAddr == 0 || h.PoolSize != 4<<20 {
		t.Fatalf("health %s: %v", hj, err)
	}
	ch, err := openConn([]byte(`{"role":"consumer","transport":"tcp","memory_mb":4,"producer":"` + h.Addr + `"}`))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := put(ph, "a", "b", "k", kindBytes, "", nil, []byte("kept"), putOptions{}, 10000); err != nil {
		t.Fatal(err)
	}
	bh, _, err := get(ch, "a", "b", "k", nil, 10000, false)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, _, err := get(ch, "a", "b", "never", nil, 0, false); waiting <- err }()
	time.Sleep(50 * time.Millisecond)

	if err := stopConn(ch); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err == nil {
		t.Fatal("a get waiting at stop succeeded")
	}
	p, n, err := bufferData(bh)
	if err != nil || string(unsafe.Slice((*byte)(p), n)) != "kept" {
		t.Fatalf("a buffer after stop: %q, %v", unsafe.Slice((*byte)(p), n), err)
	}
	if _, _, err := get(ch, "a", "b", "k", nil, 1000, true); err == nil {
		t.Fatal("a get after stop succeeded")
	}
	if err := closeConn(ch); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bufferData(bh); codeOf(err) != CodeReleased {
		t.Fatalf("a buffer after close: %v, want CodeReleased", err)
	}
	if _, _, err := get(ch, "a", "b", "k", nil, 1000, true); codeOf(err) != CodeClosed {
		t.Fatalf("a get after close: %v, want CodeClosed", err)
	}
	if err := stopConn(ch); err != nil {
		t.Fatalf("stop after close: %v", err)
	}
}
