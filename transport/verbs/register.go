package verbs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// mrAccess is what the registration of a region with rights a grants: the
// NIC's own use (LocalWrite: the region may receive a READ's data) and, for
// peers, no more than a. A read-only region's rkey cannot be used to write
// into it, whatever the peer's engine does. One exception: on iWARP a
// WRITE is complete only once a one-byte READ behind it on the same QP has
// returned (the fence, see postGroup), so a write-only region is readable
// through its rkey there.
func mrAccess(a mem.Access, iwarp bool) ibv.Access {
	acc := ibv.AccessLocalWrite
	if a&mem.AccessRead != 0 || a&mem.AccessWrite != 0 && iwarp {
		acc |= ibv.AccessRemoteRead
	}
	if a&mem.AccessWrite != 0 {
		acc |= ibv.AccessRemoteWrite
	}
	return acc
}

// grantEnforcement says what makes the NIC enforce a grant on a device
// with info: always the grant's own registration (an MR of its range with
// its rights, see mr). A type 2 memory window bound over the region's MR
// would cost no registration, but SoftRoCE's windows do not enforce their
// range (the window's rkey reaches the whole MR; internal/ibv's
// TestMemWindow shows it), and grants over windows are not built for
// other devices yet.
func grantEnforcement(info ibv.DeviceInfo) string {
	switch {
	case !info.MemWindows:
		return "registration (the device has no type 2 memory windows)"
	case strings.HasPrefix(info.Name, "rxe"):
		return "registration (rxe's memory windows do not enforce their range)"
	default:
		return "registration (grants over memory windows are not built)"
	}
}

// mr returns the registration of region h, registering the whole region
// on first use, with the region's rights (mrAccess). The caller holds a pin on h, so the engine cannot have
// deregistered it (RegionRemoved runs once the pins are gone).
func (d *device) mr(h *mem.Handle) (*ibv.MR, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone != nil {
		return nil, &transport.LinkError{Peer: "rdma peer", Cause: d.gone}
	}
	if m := d.mrs[h]; m != nil {
		return m, nil
	}
	if h == nil {
		return nil, fmt.Errorf("rdma: %w", transport.ErrNotRegistered)
	}
	if !h.Location().IsHost() {
		m, fd, err := d.regDevice(h, mrAccess(h.Access(), d.iwarp))
		if err != nil {
			return nil, err
		}
		if d.mrs == nil {
			d.mrs = make(map[*mem.Handle]*ibv.MR)
		}
		if fd >= 0 {
			if d.dmabufs == nil {
				d.dmabufs = make(map[*mem.Handle]int)
			}
			d.dmabufs[h] = fd
		}
		d.mrs[h] = m
		return m, nil
	}
	m, err := d.pd.RegMR(h.Bytes(), mrAccess(h.Access(), d.iwarp))
	if err != nil {
		return nil, fmt.Errorf("rdma: register %d MiB on %s: %w%s", h.Len()>>20, d.info.Name, err, memlockHint(err))
	}
	if d.mrs == nil {
		d.mrs = make(map[*mem.Handle]*ibv.MR)
	}
	d.mrs[h] = m
	return m, nil
}

// forget deregisters the registration of region h (before it is unmapped).
func (d *device) forget(h *mem.Handle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m := d.mrs[h]; m != nil {
		m.Close()
		delete(d.mrs, h)
	}
	if fd, ok := d.dmabufs[h]; ok {
		sys.Close(fd)
		delete(d.dmabufs, h)
	}
}

func memlockHint(err error) string {
	if errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "cannot allocate memory") {
		return " (raise the memlock limit: ulimit -l, or LimitMEMLOCK= in the service unit; xfer doctor checks it)"
	}
	return ""
}
