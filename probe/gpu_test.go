package probe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBAR1Size(t *testing.T) {
	root := t.TempDir()
	write := func(id, res string) {
		dev := filepath.Join(root, id)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, "resource"), []byte(res), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const empty = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
	// BAR0 32-bit: BAR1 on line 1 (BAR3 after it is not BAR1).
	write("0000:00:06.0", "0x00000000fd000000 0x00000000fdffffff 0x0000000000040200\n"+
		"0x0000380000000000 0x0000381fffffffff 0x000000000014220c\n"+empty+
		"0x0000382000000000 0x0000382001ffffff 0x000000000014220c\n"+empty+empty)
	// BAR0 64-bit, as an H200 in a virtual machine shows it: BAR1 on line 2.
	write("0000:00:07.0", "0x0000104002000000 0x0000104002ffffff 0x000000000014220c\n"+empty+
		"0x0000100000000000 0x0000103fffffffff 0x000000000014220c\n"+empty+
		"0x0000104000000000 0x0000104001ffffff 0x000000000014220c\n"+empty)
	// An I/O port BAR is not a memory BAR; a single memory BAR has no BAR1.
	write("0000:00:08.0", "0x000000000000c000 0x000000000000c07f 0x0000000000040101\n"+
		"0x00000000fd000000 0x00000000fdffffff 0x0000000000040200\n")
	for id, want := range map[string]uint64{
		"00000000:00:06.0": 128 << 30,
		"0000:00:07.0":     256 << 30,
		"0000:00:08.0":     0,
		"":                 0,
		"zz:00:06.0":       0,
		"00000000:00:09.0": 0,
	} {
		if got := bar1Size(root, id); got != want {
			t.Errorf("bar1Size(%q) = %d, want %d", id, got, want)
		}
	}
}

// Without a GPU, GPUs says why; with one, each device has a name and
// memory.
func TestGPUs(t *testing.T) {
	gpus, err := GPUs()
	if err != nil {
		if !errors.Is(err, ErrCUDANotAvailable) || !errors.Is(CUDA(), ErrCUDANotAvailable) {
			t.Fatalf("GPUs: %v", err)
		}
		if os.Getenv("XFER_REQUIRE_CUDA") == "1" {
			t.Fatalf("XFER_REQUIRE_CUDA=1 but: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	if len(gpus) == 0 {
		t.Fatal("CUDA loads but lists no GPU")
	}
	for _, g := range gpus {
		if g.Name == "" || g.MemoryBytes == 0 || g.PCIBusID == "" {
			t.Errorf("GPU %+v", g)
		}
		t.Logf("%+v", g)
	}
}
