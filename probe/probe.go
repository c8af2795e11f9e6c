package probe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
)

// ErrNotSupported means a feature is missing on this host or build. It is
// the same value as xfer.ErrNotSupported.
var ErrNotSupported = sys.ErrNotSupported

// Device, Port and GID describe an RDMA device, one of its ports and one
// entry of a port's GID table, as ibv_devinfo shows them (plus each GID's
// type, netdev, and whether it is IPv4-mapped or link-local).
type (
	Device = ibv.DeviceInfo
	Port   = ibv.PortInfo
	GID    = ibv.GIDInfo
)

// HugeTLB describes the kernel's pool of explicit huge pages.
type HugeTLB = sys.HugeTLB

// feature is one cached feature probe.
type feature struct {
	name  string
	probe func() error

	mu   sync.Mutex
	done bool
	err  error
}

// result runs the probe on first use and caches a conclusive answer: nil,
// or an error matching ErrNotSupported. Any other error is returned but not
// cached, so the next call probes again.
func (f *feature) result() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return f.err
	}
	err := f.probe()
	if err != nil {
		err = fmt.Errorf("%s: %w", f.name, err)
	}
	if err == nil || errors.Is(err, ErrNotSupported) {
		f.done, f.err = true, err
	}
	return err
}

var verbs = &feature{name: "libibverbs", probe: ibv.Load}

// VerbsBuilt reports whether this build has the verbs transport (it needs
// cgo on Linux) and, when it has not, why. Whether this host can use it is
// Verbs's answer.
func VerbsBuilt() (bool, string) { return ibv.Built, ibv.BuiltReason }

// Verbs reports whether libibverbs.so.1 loads. Without cgo, off Linux or
// without rdma-core the error matches ErrNotSupported and says what to
// install.
func Verbs() error { return verbs.result() }

// Devices lists the RDMA devices with their ports and GID tables; none is
// an empty list and no error. Without libibverbs the error is Verbs's.
func Devices() ([]Device, error) {
	if err := Verbs(); err != nil {
		return nil, err
	}
	devs, err := ibv.Devices()
	if errors.Is(err, ibv.ErrNoDevice) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	return devs, nil
}

// MemlockLimit returns the soft RLIMIT_MEMLOCK in bytes (^uint64(0) when
// unlimited): how much memory this process may register with an RDMA
// device unless it has CAP_IPC_LOCK.
func MemlockLimit() (uint64, error) {
	cur, _, err := sys.MemlockLimit()
	return cur, err
}

// THPMode returns the kernel's transparent huge page mode ("always",
// "madvise", "never"), or "" when unknown.
func THPMode() string { return sys.THPMode() }

// HugeTLBPages describes the kernel's explicit huge page pool.
func HugeTLBPages() (HugeTLB, error) { return sys.HugeTLBPages() }

var memfd = &feature{name: "memfd_create", probe: func() error {
	fd, err := sys.MemfdCreate("xfer-probe", false)
	if err != nil {
		return err
	}
	return sys.Close(fd)
}}

// Memfd reports whether the kernel has memfd_create, which shareable
// memory (the shm transport, memory: memfd) needs.
func Memfd() error { return memfd.result() }
