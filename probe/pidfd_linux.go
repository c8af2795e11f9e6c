package probe

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/xferio/xfer/internal/sys"
)

func probePidfd() error {
	if err := Memfd(); err != nil {
		return err
	}
	fd, err := sys.MemfdCreate("xfer-probe", false)
	if err != nil {
		return err
	}
	defer sys.Close(fd)
	p, err := sys.PidfdOpen(os.Getpid())
	if err != nil {
		return notSupportedIfMissing(err)
	}
	defer sys.Close(p)
	got, err := sys.PidfdGetfd(p, fd)
	if err != nil {
		return notSupportedIfMissing(err)
	}
	return sys.Close(got)
}

// notSupportedIfMissing marks a system call the kernel does not have
// (ENOSYS) as not supported; other errors are inconclusive.
func notSupportedIfMissing(err error) error {
	if errors.Is(err, syscall.ENOSYS) {
		return fmt.Errorf("%w: the kernel is older than Linux 5.6: %w", ErrNotSupported, err)
	}
	return err
}
