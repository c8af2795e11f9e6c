package disktier

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func value(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j*13)
	}
	return b
}

func open(t *testing.T, dir string, size int64, onEvict func(string, uint64)) (*Tier, map[string]Entry) {
	t.Helper()
	tier, ents, err := Open(Options{Dir: dir, Size: size, OnEvict: onEvict})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Entry{}
	for _, e := range ents {
		m[e.Key] = e
	}
	return tier, m
}

func readBack(t *testing.T, tier *Tier, e Entry) []byte {
	t.Helper()
	b := alignedBuf(int(roundUp(int64(e.Loc.N))) + Block)
	if err := tier.Read(e.Loc, []byte(e.Key), b[:e.Loc.N]); err != nil {
		t.Fatalf("read %s: %v", e.Key, err)
	}
	return b[:e.Loc.N]
}

// Values written come back, in place and through staging, and again after
// the file is opened anew; a tombstone removes its key; the file is 0600.
func TestWriteReadReopen(t *testing.T) {
	dir := t.TempDir()
	tier, ents := open(t, dir, 8<<20, nil)
	if len(ents) != 0 {
		t.Fatalf("a new tier holds %d entries", len(ents))
	}
	sizes := []int{0, 1, 100, Block - 1, Block, Block + 1, 100 << 10}
	locs := map[string]Entry{}
	for i, n := range sizes {
		key := fmt.Sprintf("k%d", i)
		v := value(i, n)
		if i%2 == 0 { // in place: an aligned buffer with whole blocks
			b := alignedBuf(int(roundUp(int64(n))))
			copy(b, v)
			v = b[:n]
		}
		loc, err := tier.Write([]byte(key), uint64(i+1), 2, v)
		if err != nil {
			t.Fatal(err)
		}
		locs[key] = Entry{Key: key, Ver: uint64(i + 1), Reps: 2, Loc: loc}
	}
	for i := range sizes {
		e := locs[fmt.Sprintf("k%d", i)]
		if got := readBack(t, tier, e); !bytes.Equal(got, value(i, sizes[i])) {
			t.Fatalf("k%d: wrong value", i)
		}
	}
	if err := tier.Tombstone([]byte("k1")); err != nil {
		t.Fatal(err)
	}
	if _, err := tier.Write([]byte("k2"), 99, 1, value(99, 10)); err != nil {
		t.Fatal(err)
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	tier, ents = open(t, dir, 8<<20, nil)
	defer tier.Close()
	if _, ok := ents["k1"]; ok {
		t.Error("k1 came back after its tombstone")
	}
	if len(ents) != len(sizes)-1 {
		t.Errorf("%d entries after reopening, want %d", len(ents), len(sizes)-1)
	}
	for i, n := range sizes {
		key := fmt.Sprintf("k%d", i)
		e, ok := ents[key]
		if i == 1 {
			continue
		}
		want := value(i, n)
		if i == 2 {
			want = value(99, 10)
			if e.Ver != 99 {
				t.Errorf("k2: version %d, want the newest record's 99", e.Ver)
			}
		}
		if !ok {
			t.Fatalf("%s lost", key)
		}
		if got := readBack(t, tier, e); !bytes.Equal(got, want) {
			t.Fatalf("%s: wrong value after reopening", key)
		}
	}
}

// The ring overwrites its oldest records, reports each once the record
// that overwrote it is written, and a reopened tier holds only what the
// ring still has.
func TestRingEvictsOldest(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	gone := map[string]bool{}
	tier, _ := open(t, dir, MinSize, func(k string, _ uint64) {
		mu.Lock()
		gone[k] = true
		mu.Unlock()
	})
	const n = 10 // 64 KiB each: a 1 MiB ring holds 15
	for i := range n * 3 {
		if _, err := tier.Write(fmt.Appendf(nil, "k%02d", i), 1, 1, value(i, 60<<10)); err != nil {
			t.Fatal(err)
		}
	}
	st := tier.Stats()
	if st.Used > st.Capacity || st.Evicted == 0 || int(st.Evicted) != len(gone) {
		t.Fatalf("stats %+v, %d reported gone", st, len(gone))
	}
	if gone["k29"] || !gone["k00"] {
		t.Fatalf("evicted the newest or kept the oldest: %v", gone)
	}
	tier.Close()
	tier, ents := open(t, dir, MinSize, nil)
	defer tier.Close()
	for k := range ents {
		if gone[k] {
			t.Errorf("%s came back after the ring overwrote it", k)
		}
	}
	if len(ents)+len(gone) != 3*n {
		t.Errorf("%d entries and %d gone, of %d", len(ents), len(gone), 3*n)
	}
	if _, err := tier.Write([]byte("big"), 1, 1, make([]byte, 2<<20)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a value larger than the ring: %v", err)
	}
}

// A record damaged on disk is not returned, and not found at start-up;
// Reset drops every record, for good.
func TestCorruptAndReset(t *testing.T) {
	dir := t.TempDir()
	tier, _ := open(t, dir, 4<<20, nil)
	a, err := tier.Write([]byte("a"), 1, 1, value(1, 3*Block))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tier.Write([]byte("b"), 1, 1, value(2, 3*Block))
	if err != nil {
		t.Fatal(err)
	}
	tier.Close()
	// Flip a byte of a's value and one of b's header.
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, a.Off+Block+100)
	f.WriteAt([]byte{0xff}, b.Off+30)
	f.Close()
	tier, ents := open(t, dir, 4<<20, nil)
	if _, ok := ents["b"]; ok {
		t.Error("b's corrupt header was taken")
	}
	e, ok := ents["a"]
	if !ok {
		t.Fatal("a's header is whole: it should be found")
	}
	if err := tier.Read(e.Loc, []byte("a"), make([]byte, e.Loc.N)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a corrupt value read: %v", err)
	}
	if st := tier.Stats(); st.Corrupt != 2 {
		t.Errorf("corrupt %d, want 2", st.Corrupt)
	}
	if _, err := tier.Write([]byte("c"), 1, 1, value(3, 10)); err != nil {
		t.Fatal(err)
	}
	if err := tier.Reset(); err != nil {
		t.Fatal(err)
	}
	tier.Close()
	tier, ents = open(t, dir, 4<<20, nil)
	defer tier.Close()
	if len(ents) != 0 {
		t.Errorf("%d entries after Reset", len(ents))
	}
}

// Bad directories and sizes are clear errors at Open; a second process
// cannot open the same file.
func TestOpenErrors(t *testing.T) {
	if _, _, err := Open(Options{Dir: t.TempDir(), Size: 4096}); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("tiny size: %v", err)
	}
	if _, _, err := Open(Options{Dir: t.TempDir(), Size: 1 << 60}); err == nil || !strings.Contains(err.Error(), "free") {
		t.Errorf("a size past the disk: %v", err)
	}
	dir := t.TempDir()
	tier, _ := open(t, dir, MinSize, nil)
	if _, _, err := Open(Options{Dir: dir, Size: MinSize}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second open: %v", err)
	}
	tier.Close()
	if os.Geteuid() != 0 { // root writes anywhere
		ro := t.TempDir()
		os.Chmod(ro, 0o500)
		defer os.Chmod(ro, 0o700)
		if _, _, err := Open(Options{Dir: ro, Size: MinSize}); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only directory: %v", err)
		}
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o600)
	if _, _, err := Open(Options{Dir: file, Size: MinSize}); err == nil {
		t.Error("a file as the directory: no error")
	}
}

// A directory on a file system that is read-only fails at Open with a
// clear error, for root too.
func TestOpenReadOnlyFS(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY, "size=4m"); err != nil {
		t.Skipf("cannot mount a read-only tmpfs here: %v", err)
	}
	defer syscall.Unmount(dir, 0)
	if _, _, err := Open(Options{Dir: dir, Size: MinSize}); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("read-only file system: %v", err)
	}
}

// FuzzDecodeHeader: any bytes decode to a header or an error, never a
// panic, and a decoded header encodes back to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	b := alignedBuf(2 * Block)
	encodeHeader(b, &Header{FileID: 1, Epoch: 2, Seq: 3, Ver: 4, Key: []byte("key"), N: 5, ValCRC: 6})
	f.Add(b[:Block])
	encodeHeader(b, &Header{Key: []byte("t"), Tomb: true})
	f.Add(b[:Block])
	f.Add(make([]byte, Block))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, _, err := DecodeHeader(in)
		if err != nil {
			return
		}
		out := alignedBuf(int(hdrLen(len(h.Key))))
		encodeHeader(out, &h)
		if n := hdrFixed + len(h.Key); !bytes.Equal(out[:n], in[:n]) {
			t.Fatalf("re-encoded header differs")
		}
	})
}
