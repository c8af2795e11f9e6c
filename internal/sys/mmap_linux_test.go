package sys

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMmapAnon(t *testing.T) {
	n := 3 * PageSize()
	b, err := MmapAnon(n, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != n {
		t.Fatalf("len = %d, want %d", len(b), n)
	}
	for i := range b {
		b[i] = byte(i)
	}
	if err := MadviseHugepage(b); err != nil && !errors.Is(err, unix.EINVAL) {
		t.Errorf("MadviseHugepage: %v", err)
	}
	if err := Munmap(b); err != nil {
		t.Fatal(err)
	}
}

func TestMmapAnonBadSize(t *testing.T) {
	_, err := MmapAnon(0, false)
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("MmapAnon(0) = %v, want EINVAL", err)
	}
}

func TestMemfdShared(t *testing.T) {
	n := PageSize()
	fd, err := MemfdCreate("xfer-test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(fd)
	if err := Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	a, err := MmapShared(fd, n)
	if err != nil {
		t.Fatal(err)
	}
	defer Munmap(a)
	b, err := MmapShared(fd, n)
	if err != nil {
		t.Fatal(err)
	}
	defer Munmap(b)
	copy(a, "hello through the page cache")
	if !bytes.Equal(a, b) {
		t.Fatal("second mapping does not see the first one's stores")
	}
}

// TestReopenReadOnlyIsNotASeal: a descriptor opened read-only cannot be
// mapped writable, but its holder opens the memfd again writable through
// /proc/self/fd (a memfd's mode is 0777) and writes, maps and truncates
// it. Only the seals stop that, for every descriptor: after SealWrites and
// SealSize the same steps are refused, while a mapping made before the
// seal keeps writing, and no seal can be added or removed.
func TestReopenReadOnlyIsNotASeal(t *testing.T) {
	n := PageSize()
	for _, seal := range []bool{false, true} {
		fd, err := MemfdCreate("xfer-test", false)
		if err != nil {
			t.Fatal(err)
		}
		if err := Ftruncate(fd, int64(n)); err != nil {
			t.Fatal(err)
		}
		own, err := MmapShared(fd, n)
		if err != nil {
			t.Fatal(err)
		}
		ro, err := ReopenReadOnly(fd)
		if err != nil {
			t.Fatal(err)
		}
		if seal {
			if err := SealSize(fd); err != nil {
				t.Fatal(err)
			}
			if err := SealWrites(fd); err != nil {
				t.Fatal(err)
			}
		}
		if m, err := MmapShared(ro, n); err == nil {
			Munmap(m)
			t.Errorf("seal %v: the read-only descriptor maps writable", seal)
		}
		rw, err := unix.Open("/proc/self/fd/"+strconv.Itoa(ro), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("seal %v: opening the read-only descriptor again writable: %v (a memfd's mode allows it)", seal, err)
		}
		_, werr := unix.Pwrite(rw, []byte("x"), 0)
		m, merr := MmapShared(rw, n)
		if merr == nil {
			Munmap(m)
		}
		perr := unix.Fallocate(rw, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(n))
		terr := unix.Ftruncate(rw, 0)
		if !seal {
			if werr != nil || merr != nil || perr != nil || terr != nil {
				t.Errorf("unsealed, opened again writable: write %v, writable mapping %v, hole %v, truncate %v: want all to succeed", werr, merr, perr, terr)
			}
		} else {
			for what, err := range map[string]error{"write": werr, "writable mapping": merr, "hole": perr, "truncate": terr} {
				if !errors.Is(err, unix.EPERM) {
					t.Errorf("sealed, opened again writable: %s: %v, want EPERM", what, err)
				}
			}
			if m, err := MmapShared(fd, n); !errors.Is(err, unix.EPERM) {
				if err == nil {
					Munmap(m)
				}
				t.Errorf("sealed: the owner's descriptor mapped writable again: %v, want EPERM", err)
			}
			if m, err := MmapSharedReadOnly(rw, n); err != nil {
				t.Errorf("sealed: a read-only mapping: %v", err)
			} else {
				if err := unix.Mprotect(m, unix.PROT_READ|unix.PROT_WRITE); err == nil {
					t.Error("sealed: a read-only mapping was made writable")
				}
				Munmap(m)
			}
			own[0] = 42 // the mapping made before the seal writes
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, unix.EPERM) {
				t.Errorf("sealed: adding a seal: %v, want EPERM (F_SEAL_SEAL)", err)
			}
		}
		Close(rw)
		Close(ro)
		Munmap(own)
		Close(fd)
	}
}

func TestCloseBadFD(t *testing.T) {
	if err := Close(-1); !errors.Is(err, unix.EBADF) {
		t.Fatalf("Close(-1) = %v, want EBADF", err)
	}
}

func TestBracketed(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n":                     "madvise",
		"[always] madvise never":                       "always",
		"always within_size advise [never] deny force": "never",
		"":               "",
		"always madvise": "",
		"[unterminated":  "",
	} {
		if got := bracketed(in); got != want {
			t.Errorf("bracketed(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTHPMode: each mode is the bracketed word of its sysfs file, one of
// the kernel's words, or "" exactly when the file cannot be read (a kernel
// without THP).
func TestTHPMode(t *testing.T) {
	for _, c := range []struct {
		got, path string
		words     []string
	}{
		{THPMode(), "/sys/kernel/mm/transparent_hugepage/enabled", []string{"always", "madvise", "never"}},
		{ShmemTHPMode(), "/sys/kernel/mm/transparent_hugepage/shmem_enabled", []string{"always", "within_size", "advise", "never", "deny", "force"}},
	} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			if c.got != "" {
				t.Errorf("%s cannot be read (%v), but the mode is %q", c.path, err, c.got)
			}
			continue
		}
		if want := bracketed(string(b)); c.got != want || !slices.Contains(c.words, c.got) {
			t.Errorf("%s holds %q: mode %q, want %q, one of %v", c.path, strings.TrimSpace(string(b)), c.got, want, c.words)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	in := []byte("MemTotal:       16318508 kB\n" +
		"HugePages_Total:       4\n" +
		"HugePages_Free:        3\n" +
		"HugePages_Rsvd:        1\n" +
		"HugePages_Surp:        0\n" +
		"Hugepagesize:       2048 kB\n")
	h, err := parseMeminfo(in)
	if err != nil {
		t.Fatal(err)
	}
	want := HugeTLB{Total: 4, Free: 3, Reserved: 1, PageSize: 2 << 20}
	if h != want {
		t.Fatalf("parseMeminfo = %+v, want %+v", h, want)
	}
	if _, err := parseMeminfo([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("parseMeminfo without huge page lines succeeded")
	}
}

func TestHugeTLBPages(t *testing.T) {
	h, err := HugeTLBPages()
	if err != nil {
		t.Skipf("no huge page pool: %v", err)
	}
	if h.PageSize <= PageSize() {
		t.Errorf("huge page size %d not above base page size %d", h.PageSize, PageSize())
	}
	t.Logf("%+v", h)
}
