package probe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBAR1Size(t *testing.T) {
	root := t.TempDir()
	dev := filepath.Join(root, "0000:00:06.0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	res := "0x00000000fd000000 0x00000000fdffffff 0x0000000000040200\n" +
		"0x0000380000000000 0x0000381fffffffff 0x000000000014220c\n"
	if err := os.WriteFile(filepath.Join(dev, "resource"), []byte(res), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := bar1Size(root, "00000000:00:06.0"); got != 128<<30 {
		t.Fatalf("BAR1 %d, want 128 GiB", got)
	}
	for _, id := range []string{"", "zz:00:06.0", "00000000:00:07.0"} {
		if got := bar1Size(root, id); got != 0 {
			t.Errorf("bar1Size(%q) = %d, want 0", id, got)
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
