// Package disktier is the KV server's disk tier: one preallocated file on
// a local disk, written as a ring of checksummed records with O_DIRECT.
// The kv package decides what goes there (the values its memory evicts)
// and keeps the index; this package places records, reads and writes
// them, and finds them again at start-up.
//
// The file: two superblocks (the file's random ID and its epoch), then a
// ring. Each record is a header (key, length, version, a sequence number,
// the epoch, CRC-32C of the header and of the value), padded to 4 KiB, and
// the value, padded to 4 KiB, written with one pwritev. The ring writes at
// its head and overwrites its oldest records when it comes round: the
// disk's own LRU, since a value read from disk goes back to memory and
// comes back, when evicted again, at the head. A tombstone record says a
// key has no value from before it (an overwrite or a DELETE of a value
// that has a record). Reset bumps the epoch, which makes every record
// before it invalid with one superblock write.
//
// Start-up scans the ring's headers; the newest record of each key (by
// sequence number) wins, and a tombstone removes the key. A record whose
// header fails its checks is counted and skipped; a value is checked
// against its CRC when it is read, so a torn or corrupt value is never
// returned.
//
// I/O: reads and writes are pread/pwrite (preadv, pwritev) on a file
// opened with O_DIRECT, at most InFlight at once, each from the goroutine
// that asks (Go runs a blocking syscall on a thread of its own). Buffers
// are 4 KiB-aligned: the caller's, when they are (the KV pool's blocks of
// 4 KiB and more), else a staging copy.
package disktier

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/xferio/xfer/internal/sys"
)

// FileName is the tier's file in its directory.
const FileName = "xfer-kv.tier"

// MinSize is the smallest tier: the superblocks and 1 MiB of ring.
const MinSize = dataStart + 1<<20

// DefaultInFlight is the number of reads and writes at once.
const DefaultInFlight = 4

// Options configures Open.
type Options struct {
	// Dir is the directory of the tier's file (created, 0700, if missing).
	Dir string
	// Size is the file's size in bytes, rounded down to 4 KiB; at least
	// MinSize.
	Size int64
	// InFlight is how many reads and writes run at once. Default:
	// DefaultInFlight.
	InFlight int
	// Logger receives warnings. Default: slog.Default().
	Logger *slog.Logger
	// OnEvict is called, without locks held, for each record the ring
	// overwrote, once the record that overwrote it is written (until then
	// the old record's header may still be on disk, so its key must still
	// count as having a record).
	OnEvict func(key string, seq uint64)
}

// Loc is where a record is, and what its reader checks.
type Loc struct {
	Off  int64
	Seq  uint64
	N    uint64 // the value's length
	CRC  uint32 // the value's CRC-32C
	klen int32
}

// Entry is a value found at start-up.
type Entry struct {
	Key  string
	Ver  uint64
	Reps uint8
	Loc  Loc
}

// Errors.
var (
	// ErrTooLarge: the value's record is larger than the whole ring.
	ErrTooLarge = errors.New("disk tier: value larger than the tier")
	// ErrCorrupt: a record failed its checks when read (torn, overwritten
	// meanwhile, or damaged).
	ErrCorrupt = errors.New("disk tier: corrupt record")
	// ErrClosed: the tier was closed.
	ErrClosed = errors.New("disk tier: closed")
)

type rec struct {
	off, len int64
	seq      uint64
	key      string
	tomb     bool
}

// Tier is an open disk tier.
type Tier struct {
	f       *os.File
	fd      int
	path    string
	direct  bool
	end     int64
	log     *slog.Logger
	onEvict func(string, uint64)
	sem     chan struct{}
	hdrs    sync.Pool // *[]byte: staging for headers

	io sync.RWMutex // I/O holds it shared; Reset and Close exclusive

	mu     sync.Mutex
	sup    super
	head   int64
	seq    uint64
	fifo   []rec // the ring's records, oldest first, from fifo[front]
	front  int
	used   int64
	closed bool

	writes, reads, writeErrs, readErrs, corrupt, evicted, resets atomic.Uint64
}

// Stats are the tier's counters.
type Stats struct {
	Capacity, Used           int64 // the ring's bytes, and those its records take
	Records                  int
	Writes, Reads            uint64
	WriteErrors, ReadErrors  uint64
	Corrupt, Evicted, Resets uint64
	Direct                   bool // O_DIRECT: the file system took it
	FileID, Epoch            uint64
}

// alignedBuf returns n bytes at a 4 KiB-aligned address (the Go heap does
// not move large objects).
func alignedBuf(n int) []byte {
	b := make([]byte, n+Block)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (Block - 1))
	return b[off : off+n : off+n]
}

func aligned(b []byte) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))&(Block-1) == 0
}

// Open opens (or creates) the tier's file in o.Dir, preallocated to
// o.Size, and scans it: the values it holds come back as entries. A
// directory that cannot be written, a disk without o.Size free, or a file
// another process has open are errors that say so.
func Open(o Options) (*Tier, []Entry, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	size := o.Size &^ (Block - 1)
	if size < MinSize {
		return nil, nil, fmt.Errorf("disk tier: size of %d bytes is too small: at least %d", o.Size, MinSize)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("disk tier: directory %s: %w", o.Dir, err)
	}
	path := filepath.Join(o.Dir, FileName)
	t := &Tier{path: path, end: size, log: o.Logger, onEvict: o.OnEvict, sem: make(chan struct{}, o.InFlight), direct: true}
	t.hdrs.New = func() any { b := alignedBuf(2 * Block); return &b }
	fd, direct, err := sys.OpenDirect(path, 0o600)
	t.direct = direct // false: a file system without O_DIRECT (tmpfs)
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return nil, nil, fmt.Errorf("disk tier: directory %s is not writable: %w", o.Dir, err)
		}
		return nil, nil, fmt.Errorf("disk tier: open %s: %w", path, err)
	}
	t.fd, t.f = fd, os.NewFile(uintptr(fd), path)
	fail := func(err error) (*Tier, []Entry, error) {
		t.f.Close()
		return nil, nil, err
	}
	if err := sys.LockFile(fd); err != nil {
		return fail(fmt.Errorf("disk tier: %s is in use by another process: %w", path, err))
	}
	if err := sys.Fchmod(fd, 0o600); err != nil {
		return fail(fmt.Errorf("disk tier: %s: %w", path, err))
	}
	if !t.direct {
		t.log.Warn("disk tier: the file system does not take O_DIRECT: its I/O goes through the page cache", "path", path)
	}
	allocated, free, err := sys.FileSpace(fd)
	if err != nil {
		return fail(fmt.Errorf("disk tier: %s: %w", path, err))
	}
	if grow := size - allocated; grow > 0 && free < grow {
		return fail(fmt.Errorf("disk tier: %s has %d bytes free, and a tier of %d bytes needs %d more: free space or ask for less", o.Dir, free, size, grow))
	}
	if err := sys.Preallocate(fd, size); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fail(fmt.Errorf("disk tier: %s has no room for a tier of %d bytes: %w", o.Dir, size, err))
		}
		return fail(fmt.Errorf("disk tier: preallocate %s: %w", path, err))
	}
	ents, err := t.load(size)
	if err != nil {
		return fail(err)
	}
	return t, ents, nil
}

// load reads the superblocks and scans the ring; a file with none valid,
// or of another size, starts anew (a new epoch of a new file ID).
func (t *Tier) load(size int64) ([]Entry, error) {
	b := alignedBuf(2 * Block)
	if _, err := sys.Pread(t.fd, b, 0); err != nil {
		return nil, fmt.Errorf("disk tier: read %s: %w", t.path, err)
	}
	var best super
	found := false
	for i := range 2 {
		if s, ok := decodeSuper(b[i*Block : (i+1)*Block]); ok && (!found || s.epoch > best.epoch) {
			best, found = s, true
		}
	}
	if !found || best.size != size {
		var id [8]byte
		rand.Read(id[:])
		t.sup = super{fileID: binary.LittleEndian.Uint64(id[:]) | 1, epoch: best.epoch, size: size}
		if found {
			t.sup.fileID = best.fileID
		}
		if err := t.writeSuper(); err != nil {
			return nil, err
		}
		t.head = dataStart
		return nil, nil
	}
	t.sup = best
	return t.scan()
}

// writeSuper bumps the epoch and writes the superblock; t.io held
// exclusively, or no I/O yet.
func (t *Tier) writeSuper() error {
	t.sup.epoch++
	b := alignedBuf(Block)
	encodeSuper(b, t.sup)
	if _, err := sys.Pwrite(t.fd, b, int64(t.sup.epoch%2)*Block); err != nil {
		return fmt.Errorf("disk tier: write the superblock of %s: %w", t.path, err)
	}
	return nil
}

// scanChunk is how much the scan reads at once where no header is.
const scanChunk = 1 << 20

// scan finds the ring's records of the current epoch.
func (t *Tier) scan() ([]Entry, error) {
	buf := alignedBuf(scanChunk)
	var win []byte
	var winOff int64
	get := func(off, want int64) ([]byte, error) {
		if off >= winOff && off+want <= winOff+int64(len(win)) {
			return win[off-winOff:], nil
		}
		n := min(max(want, Block), t.end-off, scanChunk)
		m, err := sys.Pread(t.fd, buf[:n], off)
		if err != nil {
			return nil, err
		}
		win, winOff = buf[:m], off
		return win, nil
	}
	var recs []rec
	latest := map[string]int{}
	var meta []Entry
	corrupt := 0
	want := int64(scanChunk)
	for off := int64(dataStart); off < t.end; {
		b, err := get(off, want)
		if err != nil {
			return nil, fmt.Errorf("disk tier: scan %s at %d: %w", t.path, off, err)
		}
		if len(b) < Block {
			break
		}
		h, need, err := DecodeHeader(b)
		if err != nil && need > 0 && off+int64(need) <= t.end {
			if b, err = get(off, int64(need)); err == nil {
				h, _, err = DecodeHeader(b)
			}
		}
		if err == nil && (h.FileID != t.sup.fileID || h.Epoch != t.sup.epoch || off+h.recLen() > t.end) {
			err = errNoHeader // another epoch's record: as good as empty
		}
		if err != nil {
			if errors.Is(err, errBadHeader) {
				corrupt++
			}
			off += Block
			want = scanChunk
			// Skip the space never written (a fresh file's, past the ring's
			// head): on ext4 and XFS its preallocated blocks are a hole to
			// SEEK_DATA, and reading them would cost a read of the whole
			// file at each start.
			if next, more, err := sys.SeekData(t.fd, off); err == nil {
				if !more {
					break
				}
				off = max(off, next&^(Block-1))
			}
			continue
		}
		r := rec{off: off, len: h.recLen(), seq: h.Seq, key: string(h.Key), tomb: h.Tomb}
		recs = append(recs, r)
		if i, ok := latest[r.key]; !ok || meta[i].Loc.Seq < h.Seq {
			e := Entry{Key: r.key, Ver: h.Ver, Reps: h.Reps, Loc: Loc{Off: off, Seq: h.Seq, N: h.N, CRC: h.ValCRC, klen: int32(len(h.Key))}}
			if h.Tomb {
				e.Loc.N = ^uint64(0)
			}
			if ok {
				meta[i] = e
			} else {
				latest[r.key] = len(meta)
				meta = append(meta, e)
			}
		}
		off += r.len
		want = 2 * Block
	}
	slices.SortFunc(recs, func(a, b rec) int { return cmpU64(a.seq, b.seq) })
	t.fifo = recs
	t.head = dataStart
	for _, r := range recs {
		t.used += r.len
	}
	if n := len(recs); n > 0 {
		t.head, t.seq = recs[n-1].off+recs[n-1].len, recs[n-1].seq
	}
	ents := meta[:0]
	for _, e := range meta {
		if e.Loc.N != ^uint64(0) {
			ents = append(ents, e)
		}
	}
	t.corrupt.Add(uint64(corrupt))
	if corrupt > 0 {
		t.log.Warn("disk tier: records with a corrupt header were dropped at start-up", "path", t.path, "records", corrupt)
	}
	return ents, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// alloc places a record of n bytes at the head, and returns its offset,
// its sequence number and the records it overwrites; t.mu held.
func (t *Tier) allocLocked(n int64, key string, tomb bool) (int64, uint64, []rec) {
	var gone []rec
	pop := func(limit int64) {
		for t.front < len(t.fifo) {
			r := t.fifo[t.front]
			if r.off < t.head || r.off >= limit {
				return
			}
			gone = append(gone, r)
			t.used -= r.len
			t.fifo[t.front] = rec{}
			t.front++
		}
	}
	if t.head+n > t.end {
		pop(t.end)
		t.head = dataStart
	}
	pop(t.head + n)
	if t.front > 1024 && t.front*2 > len(t.fifo) {
		t.fifo = append(t.fifo[:0], t.fifo[t.front:]...)
		t.front = 0
	}
	off := t.head
	t.head += n
	t.seq++
	t.fifo = append(t.fifo, rec{off: off, len: n, seq: t.seq, key: key, tomb: tomb})
	t.used += n
	return off, t.seq, gone
}

func (t *Tier) acquireIO() error {
	t.io.RLock()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		t.io.RUnlock()
		return ErrClosed
	}
	t.sem <- struct{}{}
	return nil
}

func (t *Tier) releaseIO() {
	<-t.sem
	t.io.RUnlock()
}

// Write writes a record of key's value val (version ver, replicas reps)
// and returns where it is. val is written in place when it starts at a
// 4 KiB boundary and its capacity reaches the next one past its length
// (a KV pool's block), else from a staging copy.
func (t *Tier) Write(key []byte, ver uint64, reps uint8, val []byte) (Loc, error) {
	return t.write(key, ver, reps, val, false)
}

// Tombstone writes a record that says key has no value from before it.
func (t *Tier) Tombstone(key []byte) error {
	_, err := t.write(key, 0, 0, nil, true)
	return err
}

func (t *Tier) write(key []byte, ver uint64, reps uint8, val []byte, tomb bool) (Loc, error) {
	h := Header{Ver: ver, Key: key, Reps: reps, Tomb: tomb, N: uint64(len(val))}
	hl, total := hdrLen(len(key)), h.recLen()
	if total > t.end-dataStart || len(key) > MaxKey {
		return Loc{}, ErrTooLarge
	}
	h.ValCRC = crc32.Checksum(val, castagnoli)
	if err := t.acquireIO(); err != nil {
		return Loc{}, err
	}
	defer t.releaseIO()
	t.mu.Lock()
	off, seq, gone := t.allocLocked(total, string(key), tomb)
	h.FileID, h.Epoch, h.Seq = t.sup.fileID, t.sup.epoch, seq
	t.mu.Unlock()

	hp := t.hdrs.Get().(*[]byte)
	defer t.hdrs.Put(hp)
	hdr := *hp
	if int(hl) > len(hdr) {
		hdr = alignedBuf(int(hl))
	}
	hdr = hdr[:hl]
	encodeHeader(hdr, &h)
	iov := [][]byte{hdr}
	if vl := int(roundUp(int64(len(val)))); vl > 0 {
		if aligned(val) && cap(val) >= vl {
			iov = append(iov, val[:vl])
		} else {
			st := alignedBuf(vl)
			copy(st, val)
			iov = append(iov, st)
		}
	}
	n, err := sys.Pwritev(t.fd, iov, off)
	if err == nil && int64(n) != total {
		err = fmt.Errorf("short write: %d of %d bytes", n, total)
	}
	if err != nil {
		// The records it was to overwrite may be whole still: they stay in
		// the index, and a read checks them.
		t.writeErrs.Add(1)
		return Loc{}, fmt.Errorf("disk tier: write %d bytes at %d of %s: %w", total, off, t.path, err)
	}
	t.writes.Add(1)
	t.evicted.Add(uint64(len(gone)))
	if t.onEvict != nil {
		for _, r := range gone {
			if !r.tomb {
				t.onEvict(r.key, r.seq)
			}
		}
	}
	return Loc{Off: off, Seq: seq, N: h.N, CRC: h.ValCRC, klen: int32(len(key))}, nil
}

// Read reads the value at loc, key's, into dst (at least loc.N bytes; in
// place when dst is 4 KiB-aligned with the capacity of whole blocks, else
// through a staging copy) and checks it: ErrCorrupt when the record is not
// the one loc names, whole.
func (t *Tier) Read(loc Loc, key []byte, dst []byte) error {
	if uint64(len(dst)) < loc.N {
		return fmt.Errorf("disk tier: a buffer of %d bytes for a value of %d", len(dst), loc.N)
	}
	if err := t.acquireIO(); err != nil {
		return err
	}
	defer t.releaseIO()
	hl := hdrLen(len(key))
	hp := t.hdrs.Get().(*[]byte)
	defer t.hdrs.Put(hp)
	hdr := *hp
	if int(hl) > len(hdr) {
		hdr = alignedBuf(int(hl))
	}
	hdr = hdr[:hl]
	vl := int(roundUp(int64(loc.N)))
	val := dst[:loc.N]
	var stage []byte
	iov := [][]byte{hdr}
	if vl > 0 {
		if aligned(dst) && cap(dst) >= vl {
			iov = append(iov, dst[:vl])
		} else {
			stage = alignedBuf(vl)
			iov = append(iov, stage)
		}
	}
	n, err := sys.Preadv(t.fd, iov, loc.Off)
	if err == nil && n != int(hl)+vl {
		err = fmt.Errorf("short read: %d of %d bytes", n, int(hl)+vl)
	}
	if err != nil {
		t.readErrs.Add(1)
		return fmt.Errorf("disk tier: read at %d of %s: %w", loc.Off, t.path, err)
	}
	t.reads.Add(1)
	if stage != nil {
		copy(val, stage)
	}
	h, _, err := DecodeHeader(hdr)
	t.mu.Lock()
	sup := t.sup
	t.mu.Unlock()
	if err != nil || h.FileID != sup.fileID || h.Epoch != sup.epoch || h.Seq != loc.Seq || h.Tomb ||
		h.N != loc.N || string(h.Key) != string(key) || crc32.Checksum(val, castagnoli) != h.ValCRC {
		t.corrupt.Add(1)
		return ErrCorrupt
	}
	return nil
}

// Reset forgets every record: the epoch moves on, and the records before
// it no longer count, now or after a restart. It waits for the I/O in
// flight.
func (t *Tier) Reset() error {
	t.io.Lock()
	defer t.io.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.fifo, t.front, t.used, t.head = nil, 0, 0, dataStart
	t.resets.Add(1)
	return t.writeSuper()
}

// Stats returns the tier's counters.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	s := Stats{Capacity: t.end - dataStart, Used: t.used, Records: len(t.fifo) - t.front, FileID: t.sup.fileID, Epoch: t.sup.epoch}
	t.mu.Unlock()
	s.Writes, s.Reads = t.writes.Load(), t.reads.Load()
	s.WriteErrors, s.ReadErrors = t.writeErrs.Load(), t.readErrs.Load()
	s.Corrupt, s.Evicted, s.Resets = t.corrupt.Load(), t.evicted.Load(), t.resets.Load()
	s.Direct = t.direct
	return s
}

// Path is the tier's file.
func (t *Tier) Path() string { return t.path }

// Close waits for the I/O in flight and closes the file. Idempotent.
func (t *Tier) Close() error {
	t.io.Lock()
	defer t.io.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	return t.f.Close()
}
