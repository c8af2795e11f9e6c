package verbs_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/verbs"
)

// Every validation error names the key it is about, as a config file nests
// it (rdma.<key>), and says what is allowed.
func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		cfg  verbs.Config
		want string
	}{
		{verbs.Config{Port: -1}, "config: rdma.port -1: must be between 0"},
		{verbs.Config{Port: 256}, "config: rdma.port 256:"},
		{verbs.Config{GIDIndex: verbs.GID(300)}, "config: rdma.gid_index 300: must be auto or 0 to 255"},
		{verbs.Config{GIDIndex: verbs.GID(-1)}, "config: rdma.gid_index -1: must be auto or 0 to 255"},
		{verbs.Config{MTU: 1500}, "config: rdma.mtu 1500: must be 256, 512, 1024, 2048 or 4096"},
		{verbs.Config{MaxInlineData: -1}, "config: rdma.max_inline_data -1:"},
		{verbs.Config{MaxSendWR: 1 << 20}, "config: rdma.max_send_wr 1048576:"},
		{verbs.Config{MaxRecvWR: -1}, "config: rdma.max_recv_wr -1:"},
		{verbs.Config{MaxSGE: -2}, "config: rdma.max_sge -2:"},
		{verbs.Config{QPType: "UD"}, `config: rdma.qp_type "UD": only RC is supported`},
		{verbs.Config{PollSpin: 2 * time.Second}, "config: rdma.poll_spin 2s: at most 1s"},
		{verbs.Config{PollIdle: time.Hour}, "config: rdma.poll_idle 1h0m0s: at most 1m0s"},
		{verbs.Config{PollNap: time.Second}, "config: rdma.poll_nap 1s: at most 1ms"},
		{verbs.Config{QPsPerPeer: 65}, "config: verbs.Config.QPsPerPeer 65:"},
		{verbs.Config{SliceSize: -1}, "config: verbs.Config.SliceSize -1:"},
	} {
		_, err := tc.cfg.WithDefaults()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// An invalid Config makes the transport unavailable with the same error,
// instead of a transport that fails in some other way later.
func TestNewInvalidConfig(t *testing.T) {
	tr := verbs.New(verbs.Config{MTU: 1000}, nil)
	err := tr.Available()
	if err == nil || !strings.Contains(err.Error(), "rdma.mtu 1000") {
		t.Fatalf("Available: %v, want the mtu error", err)
	}
	if errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("a bad configuration is not a missing feature: %v", err)
	}
}

func TestConfigDefaultsIdempotent(t *testing.T) {
	for _, cfg := range []verbs.Config{
		{},
		{PollSpin: -time.Second, PollIdle: -1},
		{GIDIndex: verbs.GID(0), QPType: "rc", MTU: 1024, UseEventChannel: true},
	} {
		once, err := cfg.WithDefaults()
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		twice, err := once.WithDefaults()
		if err != nil || !reflect.DeepEqual(twice, once) {
			t.Errorf("%+v: defaults again gave %+v, %v; want %+v", cfg, twice, err, once)
		}
	}
	d, _ := verbs.Config{PollSpin: -5 * time.Microsecond}.WithDefaults()
	if d.PollSpin >= 0 {
		t.Errorf("a negative poll_spin (never spin) became %v", d.PollSpin)
	}
}

// TestConfigDefaults: the zero Config gets every documented default, except
// poll_nap, whose default is the device's and so stays zero; a negative
// duration becomes -1 (never), and a set value is kept.
func TestConfigDefaults(t *testing.T) {
	d, err := verbs.Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := verbs.Config{
		MaxInlineData: verbs.DefaultMaxInlineData, MaxSendWR: verbs.DefaultMaxSendWR,
		MaxRecvWR: verbs.DefaultMaxRecvWR, MaxSGE: verbs.DefaultMaxSGE,
		PollSpin: verbs.DefaultPollSpin, PollIdle: verbs.DefaultPollIdle,
		QPsPerPeer: verbs.DefaultQPsPerPeer, SliceSize: verbs.DefaultSliceSize,
		QPType: "RC", ACKTimeout: verbs.DefaultACKTimeout, RetryCnt: verbs.DefaultRetryCnt,
		RNRRetry: verbs.DefaultRNRRetry, MinRNRTimer: verbs.DefaultMinRNRTimer,
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("defaults: %+v\nwant      %+v", d, want)
	}
	set := verbs.Config{MaxSGE: 3, QPsPerPeer: 5, SliceSize: 4096, PollIdle: time.Millisecond, PollNap: -time.Microsecond,
		ACKTimeout: 20, RetryCnt: -5, RNRRetry: 3, MinRNRTimer: 1}
	got, err := set.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got.ACKTimeout != 20 || got.RetryCnt != -1 || got.RNRRetry != 3 || got.MinRNRTimer != 1 {
		t.Errorf("QP attributes set: %+v", got)
	}
	if again, err := got.WithDefaults(); err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("WithDefaults twice: %+v, %v", again, err)
	}
	if got.MaxSGE != 3 || got.QPsPerPeer != 5 || got.SliceSize != 4096 || got.PollIdle != time.Millisecond || got.PollNap != -1 {
		t.Errorf("%+v became %+v: a set value is kept, a negative duration is -1", set, got)
	}
}

func TestGIDIndexText(t *testing.T) {
	for _, tc := range []struct {
		text string
		want verbs.GIDIndex
		out  string
	}{
		{"auto", verbs.GIDIndex{}, "auto"},
		{"AUTO", verbs.GIDIndex{}, "auto"},
		{"", verbs.GIDIndex{}, "auto"},
		{"0", verbs.GID(0), "0"},
		{" 3 ", verbs.GID(3), "3"},
		{"255", verbs.GID(255), "255"},
	} {
		var g verbs.GIDIndex
		if err := g.UnmarshalText([]byte(tc.text)); err != nil || g != tc.want {
			t.Errorf("%q: got %v, %v; want %v", tc.text, g, err, tc.want)
			continue
		}
		out, err := g.MarshalText()
		if err != nil || string(out) != tc.out {
			t.Errorf("%q: marshalled to %q, %v; want %q", tc.text, out, err, tc.out)
		}
	}
	if n, ok := verbs.GID(0).Index(); n != 0 || !ok {
		t.Errorf("GID(0).Index() = %d, %v; index 0 must not read as auto", n, ok)
	}
	if _, ok := (verbs.GIDIndex{}).Index(); ok {
		t.Error("the zero GIDIndex is not automatic")
	}
	for _, bad := range []string{"256", "-1", "first", "1.5"} {
		var g verbs.GIDIndex
		if err := g.UnmarshalText([]byte(bad)); err == nil || !strings.Contains(err.Error(), "must be auto or 0 to 255") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
	if _, err := verbs.GID(300).MarshalText(); err == nil {
		t.Error("GID(300) marshalled")
	}
}

func TestQPTypeText(t *testing.T) {
	var q verbs.QPType
	if err := q.UnmarshalText([]byte("rc")); err != nil || q != verbs.QPTypeRC {
		t.Errorf("rc: got %q, %v", q, err)
	}
	if err := q.UnmarshalText([]byte("UD")); err == nil || !strings.Contains(err.Error(), "only RC") {
		t.Errorf("UD: error %v", err)
	}
	if out, err := verbs.QPType("").MarshalText(); err != nil || string(out) != "RC" {
		t.Errorf("the default QPType marshalled to %q, %v", out, err)
	}
}

func TestConfigClone(t *testing.T) {
	orig := verbs.Config{Device: "rxe0", GIDIndex: verbs.GID(1), MaxSendWR: 64, UseCM: true}
	c := orig.Clone()
	c.Device, c.GIDIndex, c.MaxSendWR, c.UseCM = "siw0", verbs.GID(2), 128, false
	if orig.Device != "rxe0" || orig.GIDIndex != verbs.GID(1) || orig.MaxSendWR != 64 || !orig.UseCM {
		t.Errorf("changing the clone changed the original: %+v", orig)
	}
}

// Several devices are rails: a list in devices, a comma list in device
// (as RDMA_DEVICE_NAME gives it), or auto; one name is Device. Bad lists
// are errors that name the key.
func TestConfigDevices(t *testing.T) {
	for _, c := range []struct {
		cfg     verbs.Config
		device  string
		devices []string
	}{
		{verbs.Config{Devices: []string{"mlx5_0", "mlx5_1"}}, "", []string{"mlx5_0", "mlx5_1"}},
		{verbs.Config{Device: "mlx5_0, mlx5_1"}, "", []string{"mlx5_0", "mlx5_1"}},
		{verbs.Config{Device: "mlx5_0", Devices: []string{"mlx5_0", "mlx5_1"}}, "", []string{"mlx5_0", "mlx5_1"}},
		{verbs.Config{Devices: []string{"mlx5_1"}}, "mlx5_1", nil},
		{verbs.Config{Devices: []string{"AUTO"}}, "", []string{"auto"}},
		{verbs.Config{Device: "rxe0"}, "rxe0", nil},
	} {
		got, err := c.cfg.WithDefaults()
		if err != nil || got.Device != c.device || !slices.Equal(got.Devices, c.devices) {
			t.Errorf("%+v: got device %q devices %q, %v; want %q %q", c.cfg, got.Device, got.Devices, err, c.device, c.devices)
			continue
		}
		if again, err := got.WithDefaults(); err != nil || again.Device != got.Device || !slices.Equal(again.Devices, got.Devices) {
			t.Errorf("%+v: WithDefaults is not idempotent: %+v, %v", c.cfg, again, err)
		}
	}
	for _, c := range []struct {
		cfg  verbs.Config
		want string
	}{
		{verbs.Config{Devices: []string{"mlx5_0", ""}}, "rdma.devices"},
		{verbs.Config{Device: "mlx5_0,,mlx5_1"}, "rdma.device"},
		{verbs.Config{Devices: []string{"auto", "mlx5_0"}}, "auto stands alone"},
		{verbs.Config{Devices: []string{"mlx5_0", "mlx5_0"}}, "mlx5_0 twice"},
		{verbs.Config{Device: "rxe0", Devices: []string{"mlx5_0", "mlx5_1"}}, "set one of them"},
		{verbs.Config{Devices: strings.Split("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", ",")}, "at most 16"},
	} {
		if _, err := c.cfg.WithDefaults(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one that says %q", c.cfg, err, c.want)
		}
	}
	orig := verbs.Config{Devices: []string{"a", "b"}}
	c := orig.Clone()
	c.Devices[0] = "z"
	if orig.Devices[0] != "a" {
		t.Error("the clone shares Devices with the original")
	}
}
