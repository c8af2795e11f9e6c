package probe

import (
	"errors"
	"runtime"
	"testing"

	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/internal/testutil"
)

func TestMain(m *testing.M) {
	testmain.Run(m, testutil.CUDADriverFDs())
}

// TestFeatureCache: nil and not-supported answers are cached, inconclusive
// ones are not.
func TestFeatureCache(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		cached bool
	}{
		{"works", nil, true},
		{"not supported", ErrNotSupported, true},
		{"inconclusive", errors.New("permission denied"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			f := &feature{name: "thing", probe: func() error { calls++; return c.err }}
			e1, e2 := f.result(), f.result()
			if (e1 == nil) != (c.err == nil) || (e1 != nil && (!errors.Is(e1, c.err) || e1.Error() != "thing: "+c.err.Error())) {
				t.Errorf("result() = %v, want %v named by the feature", e1, c.err)
			}
			if (e1 == nil) != (e2 == nil) {
				t.Errorf("second result() = %v, first %v", e2, e1)
			}
			want := 2
			if c.cached {
				want = 1
			}
			if calls != want {
				t.Errorf("probed %d times for two calls, want %d", calls, want)
			}
		})
	}
}

// TestProbes runs the real probes: each answers nil, not supported, or an
// error that says why; memfd and pidfd work on the Linux this is tested on.
func TestProbes(t *testing.T) {
	if err := Verbs(); err != nil && !errors.Is(err, ErrNotSupported) {
		t.Errorf("Verbs() = %v: neither nil nor ErrNotSupported", err)
	}
	devs, err := Devices()
	if err != nil && !errors.Is(err, ErrNotSupported) {
		t.Errorf("Devices() = %v", err)
	}
	t.Logf("verbs: %v; %d devices", Verbs(), len(devs))
	if runtime.GOOS == "linux" {
		if err := Memfd(); err != nil {
			t.Errorf("Memfd() = %v", err)
		}
		if err := Pidfd(); err != nil {
			t.Errorf("Pidfd() = %v (Linux 5.6 has pidfd_getfd)", err)
		}
		if _, err := MemlockLimit(); err != nil {
			t.Errorf("MemlockLimit() = %v", err)
		}
	}
}
