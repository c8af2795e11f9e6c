package cuda

import "testing"

// TestDriverFD: the descriptor check is lenient with the driver's own
// descriptors only where the driver was initialised, and never with a
// regular file.
func TestDriverFD(t *testing.T) {
	loaded := Load() == nil
	for target, driver := range map[string]bool{"/dev/nvidia0": true, "/dev/nvidiactl": true, "anon_inode:[eventfd]": true,
		"pipe:[6265]": true, "socket:[6272]": true, "/tmp/leak": false, "/dev/infiniband/uverbs0": false} {
		if got, want := DriverFD(target), driver && loaded; got != want {
			t.Errorf("DriverFD(%q) = %v with the driver loaded=%v", target, got, loaded)
		}
	}
}
