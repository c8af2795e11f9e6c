package mem

import (
	"errors"
	"fmt"
	"strings"
)

// Backing is what backs an engine's host memory: a memfd, private
// anonymous memory, or the policy's choice (the root package's
// MemoryBacking, Config.Memory).
type Backing string

const (
	// BackingAuto is memfd under the auto and shm policies, private under
	// tcp and rdma. The empty Backing means it.
	BackingAuto Backing = "auto"
	// BackingMemfd is shared memory: same-host peers can map it (the shm
	// transport), and over tcp a WRITE of 64 KiB or more leaves by
	// reference, without a copy, with sendfile.
	BackingMemfd Backing = "memfd"
	// BackingPrivate is anonymous memory with transparent huge pages,
	// which a receiving socket copies into faster.
	BackingPrivate Backing = "private"
)

// ParseBacking parses "auto", "memfd" or "private" ("" means auto), or a
// GPU, "cuda:N": memory on GPU N, a shorthand for the engine's
// memory_device.
func ParseBacking(s string) (Backing, error) {
	switch m := Backing(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return BackingAuto, nil
	case BackingAuto, BackingMemfd, BackingPrivate:
		return m, nil
	default:
		if loc, err := ParseLocation(string(m)); err == nil && !loc.IsHost() {
			return Backing(loc.String()), nil
		}
	}
	return "", fmt.Errorf("memory %q: %w", s, errBacking)
}

var errBacking = errors.New("must be auto, memfd, private or cuda:N (GPU memory)")

// MarshalText implements encoding.TextMarshaler ("" is auto).
func (m Backing) MarshalText() ([]byte, error) {
	v, err := ParseBacking(string(m))
	if err != nil {
		return nil, err
	}
	return []byte(v), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseBacking. Its
// error says what is allowed; the caller names the key and the value.
func (m *Backing) UnmarshalText(text []byte) error {
	v, err := ParseBacking(string(text))
	if err != nil {
		return errBacking
	}
	*m = v
	return nil
}
