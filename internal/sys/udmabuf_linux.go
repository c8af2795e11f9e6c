package sys

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udmabufCreate is UDMABUF_CREATE, _IOW('u', 0x42, struct udmabuf_create).
const udmabufCreate = 0x40187542

// udmabufCreateArg is struct udmabuf_create of <linux/udmabuf.h>.
type udmabufCreateArg struct {
	memfd  uint32
	flags  uint32 // UDMABUF_FLAGS_CLOEXEC = 1
	offset uint64
	size   uint64
}

// Udmabuf makes a DMA-BUF of n bytes of a new memfd through the kernel's
// udmabuf driver: host memory exported the way a GPU driver exports its
// memory, so that the DMA-BUF paths of an RDMA device can be exercised
// without a GPU. It returns the DMA-BUF's descriptor and the memfd mapped
// (both the caller's to release: Munmap and Close each). n must be a
// multiple of the page size. Without the driver (no /dev/udmabuf: modprobe
// udmabuf) the error wraps ErrNotSupported.
func Udmabuf(name string, n int) (dmabuf int, mem []byte, err error) {
	dev, err := os.OpenFile("/dev/udmabuf", os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%w: no /dev/udmabuf (modprobe udmabuf)", ErrNotSupported)
		}
		return -1, nil, fmt.Errorf("udmabuf: %w", err)
	}
	defer dev.Close()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("udmabuf: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return -1, nil, fmt.Errorf("udmabuf: ftruncate %d bytes: %w", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return -1, nil, fmt.Errorf("udmabuf: seal the memfd: %w", err)
	}
	arg := udmabufCreateArg{memfd: uint32(fd), flags: 1, size: uint64(n)}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), udmabufCreate, uintptr(unsafe.Pointer(&arg)))
	if e != 0 {
		return -1, nil, fmt.Errorf("udmabuf: UDMABUF_CREATE of %d bytes: %w", n, e)
	}
	m, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(int(r))
		return -1, nil, fmt.Errorf("udmabuf: map the memfd: %w", err)
	}
	return int(r), m, nil
}
