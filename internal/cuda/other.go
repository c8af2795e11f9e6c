//go:build !cgo || !linux

package cuda

// This build has no CUDA: every call returns an error wrapping
// ErrNotAvailable that says why (unsupportedReason).

// Load reports that this build cannot use CUDA.
func Load() error { return &UnavailableError{Reason: unsupportedReason, Fix: unsupportedFix} }

// HasDriver reports false: this build cannot load the driver.
func HasDriver() bool { return false }

// SetLibrary does nothing: this build loads no library.
func SetLibrary(path string) {}

// DriverVersion reports that this build cannot use CUDA.
func DriverVersion() (major, minor int, err error) { return 0, 0, Load() }

// DeviceCount reports that this build cannot use CUDA.
func DeviceCount() (int, error) { return 0, Load() }

// Devices reports that this build cannot use CUDA.
func Devices() ([]DeviceInfo, error) { return nil, Load() }

// PointerAttributes reports that this build cannot use CUDA.
func PointerAttributes(p uintptr) (PointerInfo, error) { return PointerInfo{Device: -1}, Load() }

// Context is a retained primary context of one device. This build has
// none: Retain always fails.
type Context struct{ ordinal int }

// Retain reports that this build cannot use CUDA.
func Retain(ordinal int) (*Context, error) { return nil, Load() }

// Close does nothing. It is idempotent and nil-safe.
func (c *Context) Close() error { return nil }

// Ordinal returns the device's ordinal, or -1 for a nil Context.
func (c *Context) Ordinal() int {
	if c == nil {
		return -1
	}
	return c.ordinal
}

// Alloc reports that this build cannot use CUDA.
func (c *Context) Alloc(n int) (uintptr, error) { return 0, Load() }

// Free reports that this build cannot use CUDA.
func (c *Context) Free(p uintptr) error { return Load() }

// Memset reports that this build cannot use CUDA.
func (c *Context) Memset(p uintptr, v byte, n int) error { return Load() }

// Copy reports that this build cannot use CUDA.
func (c *Context) Copy(dst, src uintptr, n int) error { return Load() }

// AddressRange reports that this build cannot use CUDA.
func (c *Context) AddressRange(p uintptr) (base uintptr, size uint64, err error) {
	return 0, 0, Load()
}

// IPCHandle reports that this build cannot use CUDA.
func (c *Context) IPCHandle(p uintptr) (IPCHandle, error) { return IPCHandle{}, Load() }

// OpenIPC reports that this build cannot use CUDA.
func (c *Context) OpenIPC(h IPCHandle) (uintptr, error) { return 0, Load() }

// CloseIPC reports that this build cannot use CUDA.
func (c *Context) CloseIPC(p uintptr) error { return Load() }

// HostRegister reports that this build cannot use CUDA.
func (c *Context) HostRegister(b []byte) error { return Load() }

// HostUnregister reports that this build cannot use CUDA.
func (c *Context) HostUnregister(b []byte) error { return Load() }

// DMABufFD reports that this build cannot use CUDA.
func (c *Context) DMABufFD(p uintptr, n uint64) (int, error) { return -1, Load() }

// Stream is a CUDA stream. This build has none.
type Stream struct{}

// NewStream reports that this build cannot use CUDA.
func (c *Context) NewStream() (*Stream, error) { return nil, Load() }

// CopyAsync reports that this build cannot use CUDA.
func (s *Stream) CopyAsync(dst, src uintptr, n int) error { return Load() }

// Sync reports that this build cannot use CUDA.
func (s *Stream) Sync() error { return Load() }

// Close does nothing. It is idempotent and nil-safe.
func (s *Stream) Close() error { return nil }

// Event marks a point in a stream's work. This build has none.
type Event struct{}

// NewEvent reports that this build cannot use CUDA.
func (c *Context) NewEvent() (*Event, error) { return nil, Load() }

// Record reports that this build cannot use CUDA.
func (e *Event) Record(s *Stream) error { return Load() }

// Sync reports that this build cannot use CUDA.
func (e *Event) Sync() error { return Load() }

// Done reports that this build cannot use CUDA.
func (e *Event) Done() (bool, error) { return false, Load() }

// Close does nothing. It is idempotent and nil-safe.
func (e *Event) Close() error { return nil }

// realDriverLoaded reports false: this build loads no driver.
func realDriverLoaded() bool { return false }
