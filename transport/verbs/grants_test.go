package verbs

import (
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/ibv"
)

// TestGrantEnforcement: grants are registrations on every device, and the
// reason given matches the device (no windows, rxe's, or others').
func TestGrantEnforcement(t *testing.T) {
	for _, c := range []struct {
		info ibv.DeviceInfo
		want string
	}{
		{ibv.DeviceInfo{Name: "siw0"}, "no type 2 memory windows"},
		{ibv.DeviceInfo{Name: "rxe0", MemWindows: true}, "do not enforce their range"},
		{ibv.DeviceInfo{Name: "mlx5_0", MemWindows: true}, "not built"},
	} {
		got := grantEnforcement(c.info)
		if !strings.HasPrefix(got, "registration (") || !strings.Contains(got, c.want) {
			t.Errorf("grantEnforcement(%s, windows %v) = %q, want a registration because %q", c.info.Name, c.info.MemWindows, got, c.want)
		}
	}
}
