package tcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/transport/tcp"
)

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		cfg  tcp.Config
		want string
	}{
		{tcp.Config{Conns: -1}, "config: tcp.conns -1: must be between 1 and 64"},
		{tcp.Config{Conns: 1000}, "config: tcp.conns 1000: must be between 1 and 64"},
		{tcp.Config{PollSpin: 2 * time.Second}, "config: tcp.poll_spin 2s: at most 1s"},
		{tcp.Config{Congestion: "Cubic"}, `config: tcp.congestion "Cubic": want auto, system or an algorithm's name`},
		{tcp.Config{Congestion: "tcp cubic"}, `config: tcp.congestion "tcp cubic": want auto, system`},
		{tcp.Config{Congestion: "averyveryverylongname"}, `config: tcp.congestion "averyveryverylongname": want`},
	} {
		_, err := tc.cfg.WithDefaults()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct{ cfg, want tcp.Config }{
		{tcp.Config{}, tcp.Config{Conns: tcp.DefaultConns, PollSpin: tcp.DefaultPollSpin, Congestion: "auto"}},
		{tcp.Config{Conns: 1, PollSpin: -time.Second, Congestion: "system"}, tcp.Config{Conns: 1, PollSpin: -1, Congestion: "system"}},
		{tcp.Config{Conns: 64, PollSpin: time.Second, Congestion: "bbr"}, tcp.Config{Conns: 64, PollSpin: time.Second, Congestion: "bbr"}},
		{tcp.Config{Congestion: "dctcp"}, tcp.Config{Conns: tcp.DefaultConns, PollSpin: tcp.DefaultPollSpin, Congestion: "dctcp"}},
	} {
		got, err := tc.cfg.WithDefaults()
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %+v, %v; want %+v", tc.cfg, got, err, tc.want)
		}
		again, err := got.WithDefaults()
		if err != nil || again != got {
			t.Errorf("%+v: not idempotent: %+v, %v", got, again, err)
		}
	}
}

func TestConfigClone(t *testing.T) {
	orig := tcp.Config{Conns: 2, PollSpin: time.Millisecond}
	c := orig.Clone()
	c.Conns, c.PollSpin = 5, 0
	if orig.Conns != 2 || orig.PollSpin != time.Millisecond {
		t.Errorf("changing the clone changed the original: %+v", orig)
	}
}
