package mem

import "fmt"

// HugePages selects how a Region asks the kernel for huge pages. The zero
// value is HugeAuto.
type HugePages int

const (
	// HugeAuto advises the kernel to back the region with transparent huge
	// pages (madvise MADV_HUGEPAGE). The kernel decides: it follows
	// /sys/kernel/mm/transparent_hugepage/enabled (shmem_enabled for shared
	// regions). It never fails, even when transparent huge pages are off.
	HugeAuto HugePages = iota
	// HugeOff makes no request for huge pages. When the kernel's policy is
	// "always" it may still use them.
	HugeOff
	// HugeExplicit maps the region from the kernel's pool of reserved huge
	// pages (MAP_HUGETLB, MFD_HUGETLB) and rounds its size up to the huge
	// page size. When too few pages are reserved NewRegion fails with an
	// error wrapping ErrNoHugePages; reserve them with
	// `echo N > /proc/sys/vm/nr_hugepages`.
	HugeExplicit
)

// ParseHugePages parses "auto", "off" or "explicit".
func ParseHugePages(s string) (HugePages, error) {
	switch s {
	case "auto":
		return HugeAuto, nil
	case "off":
		return HugeOff, nil
	case "explicit":
		return HugeExplicit, nil
	}
	return 0, fmt.Errorf("huge pages %q: want auto, off or explicit", s)
}

// String returns "auto", "off" or "explicit".
func (h HugePages) String() string {
	switch h {
	case HugeAuto:
		return "auto"
	case HugeOff:
		return "off"
	case HugeExplicit:
		return "explicit"
	}
	return fmt.Sprintf("HugePages(%d)", int(h))
}

// MarshalText implements encoding.TextMarshaler, for flags and config files.
func (h HugePages) MarshalText() ([]byte, error) {
	if h < HugeAuto || h > HugeExplicit {
		return nil, fmt.Errorf("huge pages: invalid value %d", int(h))
	}
	return []byte(h.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseHugePages.
func (h *HugePages) UnmarshalText(text []byte) error {
	v, err := ParseHugePages(string(text))
	if err != nil {
		return err
	}
	*h = v
	return nil
}
