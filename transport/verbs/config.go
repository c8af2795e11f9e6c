package verbs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xferio/xfer/internal/wire"
)

// Defaults of Config, for the fields whose default is a number.
const (
	// DefaultMaxInlineData is Config.MaxInlineData's default, lowered to
	// what the device grants when it grants less.
	DefaultMaxInlineData = 64
	// DefaultMaxSendWR and DefaultMaxRecvWR are the queue depths.
	DefaultMaxSendWR = 256
	DefaultMaxRecvWR = 256
	// DefaultMaxSGE is the scatter-gather entries per work request.
	DefaultMaxSGE = 1
	// DefaultPollSpin is how long a poller spins after activity before it
	// sleeps on the completion channel, with the event channel.
	DefaultPollSpin = 50 * time.Microsecond
	// DefaultPollIdle is how long a busy poller spins without a post or a
	// completion before it sleeps on the completion channel.
	DefaultPollIdle = 10 * time.Millisecond
	// DefaultPollNap is how long a busy poller sleeps between its polls
	// while callers poll for their own operations, on RoCE and InfiniBand
	// devices (on iWARP it does not nap by default).
	DefaultPollNap = 50 * time.Microsecond
	// DefaultQPsPerPeer is the number of RC queue pairs per peer.
	DefaultQPsPerPeer = 2
	// DefaultSliceSize is the largest piece a WRITE or READ is cut into.
	DefaultSliceSize = 1 << 20
	// DefaultACKTimeout is Config.ACKTimeout's default: 4.096 µs × 2^14,
	// about 67 ms.
	DefaultACKTimeout = 14
	// DefaultRetryCnt and DefaultRNRRetry are the retry counts' defaults:
	// the most the verbs API allows (7 for rnr_retry means without end).
	DefaultRetryCnt = 7
	DefaultRNRRetry = 7
	// DefaultMinRNRTimer is Config.MinRNRTimer's default, 0.64 ms.
	DefaultMinRNRTimer = 12
)

// Limits that Config.WithDefaults checks.
const (
	maxQueueParam = 1 << 16                 // max_inline_data, max_send_wr, max_recv_wr, max_sge
	maxPort       = 255                     // port: one byte in the handshake
	maxPollSpin   = time.Second             // poll_spin
	maxPollIdle   = time.Minute             // poll_idle
	maxPollNap    = time.Millisecond        // poll_nap
	maxSliceSize  = 1 << 30                 // SliceSize
	maxGIDIndex   = 255                     // gid_index: one byte in the handshake
	maxQPsPerPeer = wire.MaxQPs             // QPsPerPeer: the handshake's bound
	keyPrefix     = "config: rdma."         // errors name the key as a config file nests it
	internalKey   = "config: verbs.Config." // fields without a config file key
)

// Config selects and sizes the rdma transport's resources (the table of
// the verbs transport's options: device, port, GID index, queue sizes,
// polling). In a config file it is the rdma mapping (rdma: {device: rxe0})
// or the same keys with an rdma_ prefix (rdma_device: rxe0).
//
// The zero value of every field means its documented default, so Config{}
// opens the first device with an ACTIVE port. WithDefaults checks a Config
// and fills in the defaults; its errors name the key
// ("config: rdma.gid_index 300: must be auto or 0 to 255").
type Config struct {
	// Device is the RDMA device to open, e.g. "rxe0" or "mlx5_0". A comma
	// list ("mlx5_0,mlx5_1", as RDMA_DEVICE_NAME may give it) means
	// Devices. Default: the first device with an ACTIVE port.
	Device string `yaml:"device"`
	// Devices lists the devices to connect peers over, each a rail: a
	// peer is connected over as many rails as both sides have (paired by
	// the networks of their GIDs, else in order; devices on the process's
	// NUMA node first), large WRITEs and READs are cut into slices spread
	// over the rails, small ones go to the rail with the fewest in flight,
	// and those in flight on a rail whose device fails are repeated on
	// another, until the rail is back. "auto" as the only item means
	// every device with an ACTIVE port. Default: none, one device
	// (Device).
	Devices []string `yaml:"devices"`
	// Port is the device's port number, from 1. Default: the device's
	// first ACTIVE port.
	Port int `yaml:"port"`
	// GIDIndex is the index into the port's GID table, or automatic: the
	// zero GIDIndex, "auto" in a config file. Default: automatic, which on
	// RoCE prefers a RoCE v2 IPv4-mapped GID and never takes a link-local
	// one (it does not route); on InfiniBand it takes GID 0.
	GIDIndex GIDIndex `yaml:"gid_index"`
	// MTU caps the path MTU in bytes: 256, 512, 1024, 2048 or 4096.
	// Default: the smaller of both ports' active MTUs.
	MTU int `yaml:"mtu"`
	// MaxInlineData is the largest WRITE or SEND whose data is copied into
	// the work request instead of read by the NIC from registered memory.
	// Default: 64 (DefaultMaxInlineData), or less if the device grants less.
	MaxInlineData int `yaml:"max_inline_data"`
	// MaxSendWR is the depth of each queue pair's send queue.
	// Default: 256 (DefaultMaxSendWR).
	MaxSendWR int `yaml:"max_send_wr"`
	// MaxRecvWR is the most receive buffers a peer posts (its receive ring
	// is the smaller of this and recv_depth). Default: 256
	// (DefaultMaxRecvWR).
	MaxRecvWR int `yaml:"max_recv_wr"`
	// MaxSGE is the scatter-gather entries per send work request: each
	// QP is created with it as max_send_sge. The device's max_sge bounds
	// it; above that the transport is unavailable and says why. xfer posts
	// one entry per request (a transfer is one contiguous range of a
	// registered region), so more only reserves room in each send queue
	// entry; receives use one entry. Default: 1 (DefaultMaxSGE).
	MaxSGE int `yaml:"max_sge"`
	// QPType is the queue pair type; only RC (reliable connected) is
	// supported. Default: RC.
	QPType QPType `yaml:"qp_type"`
	// UseSRQ makes a peer's queue pairs share one receive queue.
	// Default: false (a receive queue per queue pair).
	UseSRQ bool `yaml:"use_srq"`
	// UseEventChannel chooses how completion pollers wait. False, the
	// polling mode: they busy-poll while operations are posted, so no
	// completion waits for a wake-up, and sleep on the completion channel
	// after PollIdle without traffic. True: they sleep on the channel
	// PollSpin after each burst, which saves CPU under light load and costs
	// a wake-up per request. Default: false.
	UseEventChannel bool `yaml:"use_event_channel"`
	// PollSpin is, with the event channel, how long a poller keeps polling
	// after activity before it sleeps: a request that completes within it
	// skips a wake-up. Default: 50µs (DefaultPollSpin); negative: never
	// spin. At most 1s.
	PollSpin time.Duration `yaml:"poll_spin"`
	// PollIdle is, with busy polling, how long a poller spins without a
	// post or a completion before it sleeps on the completion channel.
	// Default: 10ms (DefaultPollIdle); negative: never sleep while a peer
	// is connected (as perftest polls: a core per device, always). At most
	// 1m.
	PollIdle time.Duration `yaml:"poll_idle"`
	// PollNap is, with busy polling, how long a poller sleeps between its
	// polls while callers poll for their own operations (synchronous calls,
	// waited batches) and take every completion, instead of spinning
	// beside them on a CPU of its own; it spins again once it finds a
	// message or notification. Default: 50µs (DefaultPollNap) on RoCE and
	// InfiniBand, none on iWARP (over SoftiWARP, whose work runs in kernel
	// threads, napping cost bandwidth); negative: never nap. At most 1ms.
	PollNap time.Duration `yaml:"poll_nap"`
	// UseCM connects queue pairs through rdma_cm on RoCE and InfiniBand
	// too; iWARP devices always use it. Default: false (the engine's own
	// exchange of queue pair numbers over the handshaken connection).
	UseCM bool `yaml:"use_cm"`
	// ACKTimeout is each queue pair's local ACK timeout, as the verbs API
	// encodes it: 4.096 µs × 2^n, n from 1 to 31 (the time a request waits
	// for its acknowledgement before it is retransmitted). Default: 14
	// (DefaultACKTimeout, about 67 ms). Through rdma_cm (use_cm, iWARP) the
	// CM sets it from the path instead.
	ACKTimeout int `yaml:"timeout"`
	// RetryCnt is how many times a queue pair retransmits a request that
	// was not acknowledged before it fails it (a retry-exceeded error),
	// from 1 to 7. Default: 7; negative: none.
	RetryCnt int `yaml:"retry_cnt"`
	// RNRRetry is how many times a queue pair sends a request again after
	// a receiver-not-ready NAK (the peer had no receive posted), from 1 to
	// 7, where 7 means without end. Default: 7; negative: none.
	RNRRetry int `yaml:"rnr_retry"`
	// MinRNRTimer is how long a queue pair asks its peer to wait before it
	// sends again after a receiver-not-ready NAK, as the verbs API encodes
	// it: from 1 (0.01 ms) to 31 (491.52 ms). Default: 12
	// (DefaultMinRNRTimer, 0.64 ms).
	MinRNRTimer int `yaml:"min_rnr_timer"`
	// QPsPerPeer is the number of RC queue pairs per peer; large transfers
	// are cut into slices spread over them. Not a config file key.
	// Default: 2 (DefaultQPsPerPeer); at most 64.
	QPsPerPeer int `yaml:"-"`
	// SliceSize is the largest piece, in bytes, that a WRITE or READ is cut
	// into. Not a config file key. Default: 1 MiB (DefaultSliceSize); at
	// most 1 GiB.
	SliceSize int `yaml:"-"`
}

// Clone returns a copy of c that shares nothing with it.
func (c Config) Clone() Config {
	c.Devices = slices.Clone(c.Devices)
	return c
}

// autoDevices is the Devices item that means every device with an ACTIVE
// port.
const autoDevices = "auto"

// railNames returns the rails Devices and Device name, checked: nil when
// they name none or one (Device), ["auto"] for every active device, or
// the names, each once.
func (c Config) railNames() ([]string, error) {
	names := c.Devices
	key := "devices"
	if len(names) == 0 && strings.Contains(c.Device, ",") {
		names, key = strings.Split(c.Device, ","), "device"
	}
	if len(names) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			return nil, fmt.Errorf("%s%s %q: an empty device name", keyPrefix, key, strings.Join(names, ","))
		case strings.EqualFold(n, autoDevices) && len(names) > 1:
			return nil, fmt.Errorf("%s%s %q: auto stands alone (every device with an ACTIVE port)", keyPrefix, key, strings.Join(names, ","))
		case strings.EqualFold(n, autoDevices):
			n = autoDevices
		case slices.Contains(out, n):
			return nil, fmt.Errorf("%s%s %q: %s twice", keyPrefix, key, strings.Join(names, ","), n)
		}
		out = append(out, n)
	}
	if len(out) > wire.MaxRails {
		return nil, fmt.Errorf("%s%s: %d devices, at most %d", keyPrefix, key, len(out), wire.MaxRails)
	}
	if c.Device != "" && key == "devices" && c.Device != out[0] {
		return nil, fmt.Errorf("%sdevice %q and %sdevices %q: set one of them (devices' first item is the device)", keyPrefix, c.Device, keyPrefix, strings.Join(out, ","))
	}
	return out, nil
}

// WithDefaults checks c and returns it with the defaults filled in. It is
// idempotent: a Config it returned comes back unchanged. Errors name the key.
func (c Config) WithDefaults() (Config, error) {
	devs, err := c.railNames()
	if err != nil {
		return c, err
	}
	switch {
	case len(devs) == 1 && devs[0] != autoDevices:
		c.Device, c.Devices = devs[0], nil // one device
	case len(devs) > 0:
		c.Device, c.Devices = "", devs
	}
	if c.Port < 0 || c.Port > maxPort {
		return c, fmt.Errorf("%sport %d: must be between 0 (the first ACTIVE port) and %d", keyPrefix, c.Port, maxPort)
	}
	if err := c.GIDIndex.check(); err != nil {
		return c, fmt.Errorf("%sgid_index %s: %w", keyPrefix, c.GIDIndex, err)
	}
	switch c.MTU {
	case 0, 256, 512, 1024, 2048, 4096:
	default:
		return c, fmt.Errorf("%smtu %d: must be 256, 512, 1024, 2048 or 4096", keyPrefix, c.MTU)
	}
	// The counts: zero means the default, and each has a bound. A key
	// carries its prefix: a config file key, or a field without one.
	for _, p := range []struct {
		key      string
		v        *int
		def, max int
	}{
		{keyPrefix + "max_inline_data", &c.MaxInlineData, DefaultMaxInlineData, maxQueueParam},
		{keyPrefix + "max_send_wr", &c.MaxSendWR, DefaultMaxSendWR, maxQueueParam},
		{keyPrefix + "max_recv_wr", &c.MaxRecvWR, DefaultMaxRecvWR, maxQueueParam},
		{keyPrefix + "max_sge", &c.MaxSGE, DefaultMaxSGE, maxQueueParam},
		{internalKey + "QPsPerPeer", &c.QPsPerPeer, DefaultQPsPerPeer, maxQPsPerPeer},
		{internalKey + "SliceSize", &c.SliceSize, DefaultSliceSize, maxSliceSize},
	} {
		switch {
		case *p.v < 0 || *p.v > p.max:
			return c, fmt.Errorf("%s %d: must be between 0 (default %d) and %d", p.key, *p.v, p.def, p.max)
		case *p.v == 0:
			*p.v = p.def
		}
	}
	qp, err := parseQPType(string(c.QPType))
	if err != nil {
		return c, fmt.Errorf("%sqp_type %q: %w", keyPrefix, c.QPType, err)
	}
	c.QPType = qp
	// The queue pairs' attributes, as the verbs API encodes them.
	for _, p := range []struct {
		key      string
		v        *int
		def, max int
		never    bool // negative means none (-1)
	}{
		{"timeout", &c.ACKTimeout, DefaultACKTimeout, 31, false},
		{"retry_cnt", &c.RetryCnt, DefaultRetryCnt, 7, true},
		{"rnr_retry", &c.RNRRetry, DefaultRNRRetry, 7, true},
		{"min_rnr_timer", &c.MinRNRTimer, DefaultMinRNRTimer, 31, false},
	} {
		switch {
		case *p.v > p.max || *p.v < 0 && !p.never:
			lo := "1"
			if p.never {
				lo = "1 (negative: none)"
			}
			return c, fmt.Errorf("%s%s %d: must be between %s and %d (default %d)", keyPrefix, p.key, *p.v, lo, p.max, p.def)
		case *p.v == 0:
			*p.v = p.def
		case *p.v < 0:
			*p.v = -1
		}
	}
	// The poller's durations: zero is the default (poll_nap's is the
	// device's, so it stays zero here), any negative one is -1, "never".
	for _, p := range []struct {
		key      string
		v        *time.Duration
		def, max time.Duration
		never    string
	}{
		{"poll_spin", &c.PollSpin, DefaultPollSpin, maxPollSpin, "spin"},
		{"poll_idle", &c.PollIdle, DefaultPollIdle, maxPollIdle, "sleep"},
		{"poll_nap", &c.PollNap, 0, maxPollNap, "nap"},
	} {
		switch {
		case *p.v > p.max:
			return c, fmt.Errorf("%s%s %v: at most %v (negative: never %s)", keyPrefix, p.key, *p.v, p.max, p.never)
		case *p.v == 0:
			*p.v = p.def
		case *p.v < 0:
			*p.v = -1
		}
	}
	return c, nil
}

// GIDIndex is an index into a port's GID table, or automatic selection.
// The zero GIDIndex is automatic ("auto" as text); GID(n) is index n, from
// 0 to 255. As text (config files, MarshalText) it is "auto" or the index.
type GIDIndex struct {
	set bool // false: automatic
	n   int
}

// GID returns the GIDIndex of table index n (0 to 255; WithDefaults
// rejects others).
func GID(n int) GIDIndex { return GIDIndex{set: true, n: n} }

// Index returns the table index, or ok false for automatic selection.
func (g GIDIndex) Index() (n int, ok bool) { return g.n, g.set }

// orAuto is the index, or -1 for automatic selection.
func (g GIDIndex) orAuto() int {
	if !g.set {
		return -1
	}
	return g.n
}

// String is "auto" or the index.
func (g GIDIndex) String() string {
	if !g.set {
		return "auto"
	}
	return strconv.Itoa(g.n)
}

func (g GIDIndex) check() error {
	if g.set && (g.n < 0 || g.n > maxGIDIndex) {
		return fmt.Errorf("must be auto or 0 to %d", maxGIDIndex)
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler: "auto" or the index.
func (g GIDIndex) MarshalText() ([]byte, error) {
	if err := g.check(); err != nil {
		return nil, fmt.Errorf("gid_index %s: %w", g, err)
	}
	return []byte(g.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: "auto" (or empty) or
// an index from 0 to 255.
func (g *GIDIndex) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if s == "" || strings.EqualFold(s, "auto") {
		*g = GIDIndex{}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxGIDIndex {
		return fmt.Errorf("must be auto or 0 to %d", maxGIDIndex)
	}
	*g = GID(n)
	return nil
}

// QPType is a queue pair type. Only QPTypeRC is supported; the empty
// QPType means it.
type QPType string

// QPTypeRC is the reliable connected queue pair type.
const QPTypeRC QPType = "RC"

// parseQPType accepts "RC" in any case, and "" for the default.
func parseQPType(s string) (QPType, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", string(QPTypeRC):
		return QPTypeRC, nil
	}
	return "", fmt.Errorf("only %s is supported", QPTypeRC)
}

// MarshalText implements encoding.TextMarshaler.
func (q QPType) MarshalText() ([]byte, error) {
	p, err := parseQPType(string(q))
	if err != nil {
		return nil, fmt.Errorf("qp_type %q: %w", string(q), err)
	}
	return []byte(p), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: "RC" in any case.
func (q *QPType) UnmarshalText(text []byte) error {
	p, err := parseQPType(string(text))
	if err != nil {
		return err
	}
	*q = p
	return nil
}

// count is a retry count as the verbs API takes it: -1 (none) is 0.
func count(n int) int { return max(n, 0) }
