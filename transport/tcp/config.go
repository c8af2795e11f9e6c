package tcp

import (
	"fmt"
	"time"
)

// Defaults of Config.
const (
	// DefaultConns is the number of TCP connections per peer: one for
	// small operations and messages, four bulk. A connection's stream
	// idles between its payloads (the sender waits for room, the receiver
	// for a wake-up), and four bulk streams keep a small host's CPUs
	// busier than two (measured in docs/TUNING.md, "Engine defaults on
	// tcp").
	DefaultConns = 5
	// DefaultPollSpin is how long a connection's reader spins on a drained
	// socket before it waits in the Go poller.
	DefaultPollSpin = 20 * time.Microsecond
	// MaxConns is the most connections per peer that Config accepts.
	MaxConns = 64
	// maxPollSpin bounds Config.PollSpin.
	maxPollSpin = time.Second
)

// The modes of Config.Congestion; any other value names an algorithm.
const (
	// CongestionAuto gives connections to a peer on the same host
	// SameHostCongestion and leaves the others to the system's default.
	CongestionAuto = "auto"
	// CongestionSystem leaves every connection to the system's default.
	CongestionSystem = "system"
	// SameHostCongestion is the congestion control CongestionAuto picks for
	// a peer on the same host: a loss-based algorithm without pacing.
	// Between two sockets of one host nothing is lost and nothing queues
	// but the receiver's window, so every loss-based algorithm opens its
	// window alike, while a paced one (BBR, the default of some
	// distributions) spaces the segments out with a timer each. Linux lets
	// every process choose reno; others must be listed in
	// net.ipv4.tcp_allowed_congestion_control.
	SameHostCongestion = "reno"
)

// Config configures the tcp transport's connections. In a config file it
// is the tcp mapping (tcp: {conns: 5, poll_spin: 20us}) or the same keys at
// the top level (conns: 5).
//
// The engine states Conns in its handshake (the peers use the smaller of
// their two values) and hands both values to the transport in
// transport.Params. PollSpin reaches every stream (transport/stream) that
// way: the tcp transport's connections, and the control stream that shm
// and rdma keep beside their own data path. shm's message-ring readers
// spin for it too (transport/shm/doc.go).
//
// The zero value of every field means its documented default. WithDefaults
// checks a Config and fills in the defaults; its errors name the key
// ("config: tcp.conns 100: must be between 1 and 64").
type Config struct {
	// Conns is the number of TCP connections per peer: the first carries
	// small operations and messages, the others bulk transfers. Default: 5
	// (DefaultConns); at most 64 (MaxConns).
	Conns int `yaml:"conns"`
	// PollSpin is how long a connection's reader keeps reading a drained
	// socket before it waits in the Go poller: an answer that comes within
	// it skips the wake-up of an idle CPU, which on a virtual machine costs
	// more than a loopback round trip. At most half the CPUs spin at once,
	// and no reader spins while more readers than that began to wait for
	// data within the last millisecond (a busy process's CPUs do not go
	// idle). Default: 20µs (DefaultPollSpin; the KV service's engines use
	// 50µs, kv.DefaultPollSpin); negative: never spin. At most 1s.
	PollSpin time.Duration `yaml:"poll_spin"`
	// Congestion is the TCP congestion control of xfer's connections:
	// "auto" gives connections to a peer on the same host (a loopback
	// address, or the host's own) reno, a loss-based algorithm without
	// pacing, and leaves the others to the system's default
	// (net.ipv4.tcp_congestion_control); "system" leaves every connection
	// to the system's default; any other value is an algorithm's name
	// ("cubic", "bbr", "dctcp", ...), set on every connection, which the
	// kernel must have (net.ipv4.tcp_available_congestion_control) and
	// allow this process (net.ipv4.tcp_allowed_congestion_control, or
	// CAP_NET_ADMIN). Both sides apply their own: the sender's choice is
	// what governs each direction. Where the system's default is paced
	// (bbr), same-host bulk transfers move 1.1–1.4 times as much with
	// reno (docs/TUNING.md, "Congestion control between two sockets of
	// one host"). Default: auto (CongestionAuto).
	Congestion string `yaml:"congestion"`
}

// Clone returns a copy of c. Config holds only values, so the copy shares
// nothing with c.
func (c Config) Clone() Config { return c }

// WithDefaults checks c and returns it with the defaults filled in. It is
// idempotent: a Config it returned comes back unchanged. Errors name the key.
func (c Config) WithDefaults() (Config, error) {
	switch {
	case c.Conns == 0:
		c.Conns = DefaultConns
	case c.Conns < 0 || c.Conns > MaxConns:
		return c, fmt.Errorf("config: tcp.conns %d: must be between 1 and %d", c.Conns, MaxConns)
	}
	switch {
	case c.PollSpin > maxPollSpin:
		return c, fmt.Errorf("config: tcp.poll_spin %v: at most %v (negative: never spin)", c.PollSpin, maxPollSpin)
	case c.PollSpin == 0:
		c.PollSpin = DefaultPollSpin
	case c.PollSpin < 0:
		c.PollSpin = -1
	}
	switch {
	case c.Congestion == "":
		c.Congestion = CongestionAuto
	case !validCongestion(c.Congestion):
		return c, fmt.Errorf("config: tcp.congestion %q: want auto, system or an algorithm's name (lowercase letters, digits and _, at most 15)", c.Congestion)
	}
	return c, nil
}

// validCongestion reports whether name can be a congestion control
// algorithm's name (the kernel's TCP_CA_NAME_MAX is 16 with the NUL).
func validCongestion(name string) bool {
	if len(name) > 15 {
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}
