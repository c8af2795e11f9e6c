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
	return c, nil
}
