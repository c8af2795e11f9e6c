package xfer

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xferio/xfer/transport/verbs"
)

// Policy chooses the transport used for a peer.
type Policy string

const (
	// PolicyAuto picks the best transport both sides can use: rdma where both
	// have a usable device, shm for peers on the same host, tcp otherwise.
	PolicyAuto Policy = "auto"
	// PolicyTCP always uses TCP.
	PolicyTCP Policy = "tcp"
	// PolicySHM uses shared memory and fails for peers on other hosts.
	PolicySHM Policy = "shm"
	// PolicyRDMA uses RDMA verbs and never falls back.
	PolicyRDMA Policy = "rdma"
)

// ParsePolicy parses "auto", "tcp", "shm" or "rdma" ("" means auto).
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return PolicyAuto, nil
	case PolicyAuto, PolicyTCP, PolicySHM, PolicyRDMA:
		return p, nil
	}
	return "", fmt.Errorf("transport %q: must be one of auto, tcp, shm, rdma", s)
}

// DefaultPollSpin is how long a connection's reader spins on a drained
// socket before it waits in the poller (Config.PollSpin).
const DefaultPollSpin = 20 * time.Microsecond

// Config configures an Engine. The zero value of every field means the
// documented default, so Config{} is a valid configuration of an engine that
// does not listen.
type Config struct {
	// Listen is the TCP address the engine accepts peers on, e.g.
	// "127.0.0.1:7471" or ":0". Empty means the engine only dials.
	Listen string `yaml:"listen"`
	// Advertise is the address peers should use to reach this engine, when it
	// differs from Listen (NAT, wildcard listen). Default: the listen address.
	Advertise string `yaml:"advertise"`
	// Transport is the transport policy. Default: auto.
	Transport Policy `yaml:"transport"`
	// MemoryMB is the size of the engine's default registered pool, in MiB.
	// Default: 64.
	MemoryMB int `yaml:"memory_mb"`
	// HugePages is "auto" (transparent huge pages where the kernel allows),
	// "off" or "explicit" (hugetlbfs pages, which must be reserved). Default:
	// auto.
	HugePages string `yaml:"huge_pages"`
	// Memory is what backs the engine's memory (its pool and NewRegion's
	// regions): "memfd" (shared memory: same-host peers can map it, the shm
	// transport, and over tcp a WRITE of 64 KiB or more leaves by reference,
	// without a copy, with sendfile), "private" (anonymous memory with
	// transparent huge pages, which a receiving socket copies into faster)
	// or "auto": memfd under the auto and shm policies, private under tcp
	// and rdma. The shm policy needs memfd. Default: auto.
	Memory string `yaml:"memory"`
	// Secret, when set, makes the handshake authenticate both sides with a
	// challenge and response (HMAC-SHA256); the secret never crosses the
	// wire. A peer that does not know it gets nothing. Default: none.
	Secret string `yaml:"secret"`
	// Conns is the number of TCP connections per peer on the tcp transport:
	// the first carries small operations and messages, the others bulk
	// transfers. Default: 3 (two bulk streams use both cores of a small host
	// better than one; measured in docs/BENCHMARKS.md).
	Conns int `yaml:"conns"`
	// MaxMessage is the largest Send payload in bytes. Default: 64 KiB;
	// at most 16 MiB.
	MaxMessage int `yaml:"max_message"`
	// RecvDepth is how many received messages may wait in a peer's receive
	// queue before senders wait. Default: 128.
	RecvDepth int `yaml:"recv_depth"`
	// PollSpin is how long a connection's reader keeps reading a drained
	// socket before it waits in the Go poller: an answer that comes within
	// it skips the wake-up of an idle CPU, which on a virtual machine costs
	// more than a loopback round trip. At most half the CPUs spin at once,
	// and no reader spins while more readers than that began to wait for
	// data within the last millisecond (a busy process's CPUs do not go
	// idle).
	// Default: 20µs (the KV service's engines: 50µs, kv.DefaultPollSpin);
	// negative: never spin.
	PollSpin time.Duration `yaml:"poll_spin"`
	// The rdma transport (the settings of perftest and of other engines' RDMA
	// config tables). XFER_DEVICE, and then
	// RDMA_DEVICE_NAME, override RDMADevice.

	// RDMADevice is the device to use. Default: the first with an ACTIVE port.
	RDMADevice string `yaml:"rdma_device"`
	// RDMAPort is the port number. Default: the first ACTIVE port.
	RDMAPort int `yaml:"rdma_port"`
	// RDMAGIDIndex is the GID table index, or "auto" (default): on RoCE a
	// RoCE v2 IPv4-mapped GID is preferred and a link-local one never used.
	RDMAGIDIndex string `yaml:"rdma_gid_index"`
	// RDMAMTU caps the path MTU (256, 512, 1024, 2048 or 4096). Default: the
	// smaller of both ports' active MTUs.
	RDMAMTU int `yaml:"rdma_mtu"`
	// RDMAMaxInlineData is the largest SEND copied into the work request.
	// Default: 64, or less if the device grants less.
	RDMAMaxInlineData int `yaml:"rdma_max_inline_data"`
	// RDMAMaxSendWR and RDMAMaxRecvWR are the queue depths. Default: 256.
	RDMAMaxSendWR int `yaml:"rdma_max_send_wr"`
	RDMAMaxRecvWR int `yaml:"rdma_max_recv_wr"`
	// RDMAMaxSGE is the scatter-gather entries per request. Default: 1.
	RDMAMaxSGE int `yaml:"rdma_max_sge"`
	// RDMAQPType is the queue pair type; only "RC" (default) is supported.
	RDMAQPType string `yaml:"rdma_qp_type"`
	// RDMAUseSRQ shares one receive queue among a peer's queue pairs.
	RDMAUseSRQ bool `yaml:"rdma_use_srq"`
	// RDMAUseEventChannel is "false" (default, the polling mode that
	// perftest and the RDMA config tables of other engines use):
	// completion pollers busy-poll while operations are posted, so no
	// completion waits for a wake-up, and sleep on the completion channel
	// after rdma_poll_idle without traffic; or "true": they sleep on the
	// channel rdma_poll_spin after each burst, which saves CPU under light
	// load and costs a wake-up per request.
	RDMAUseEventChannel string `yaml:"rdma_use_event_channel"`
	// RDMAPollSpin is, with the event channel, how long a poller keeps
	// polling after activity before it sleeps: a request that completes
	// within it skips a wake-up. Default: 50µs; negative: never spin.
	RDMAPollSpin time.Duration `yaml:"rdma_poll_spin"`
	// RDMAPollIdle is, with busy polling, how long a poller spins without
	// a post or a completion before it sleeps on the completion channel.
	// Default: 10ms; negative: never sleep while a peer is connected (as
	// perftest polls; a core per device, always).
	RDMAPollIdle time.Duration `yaml:"rdma_poll_idle"`
	// RDMAUseCM connects queue pairs through rdma_cm on RoCE and InfiniBand
	// too; iWARP devices always use it. Default: the engine's own exchange.
	RDMAUseCM bool `yaml:"rdma_use_cm"`
	// HandshakeTimeout bounds Dial's handshake and an inbound peer's
	// handshake. Default: 10s.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// Logger receives the engine's logs. Default: slog.Default() at warn
	// level.
	Logger *slog.Logger `yaml:"-"`
}

// Defaults.
const (
	DefaultMemoryMB         = 64
	DefaultConns            = 3
	DefaultMaxMessage       = 64 << 10
	MaxMaxMessage           = 16 << 20
	DefaultRecvDepth        = 128
	DefaultHandshakeTimeout = 10 * time.Second
	maxConns                = 64
	maxRecvDepth            = 1 << 16
)

// withDefaults validates c and fills in defaults. Errors name the key.
func (c Config) withDefaults() (Config, error) {
	var err error
	if c.Transport, err = ParsePolicy(string(c.Transport)); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	switch {
	case c.MemoryMB == 0:
		c.MemoryMB = DefaultMemoryMB
	case c.MemoryMB < 0 || c.MemoryMB > 1<<20:
		return c, fmt.Errorf("config: memory_mb %d: must be between 1 and 1048576", c.MemoryMB)
	}
	if c.HugePages == "" {
		c.HugePages = "auto"
	}
	switch c.HugePages {
	case "auto", "off", "explicit":
	default:
		return c, fmt.Errorf("config: huge_pages %q: must be auto, off or explicit", c.HugePages)
	}
	switch c.Memory {
	case "", "auto":
		c.Memory = "auto"
	case "memfd", "private":
	default:
		return c, fmt.Errorf("config: memory %q: must be auto, memfd or private", c.Memory)
	}
	if c.Memory == "private" && c.Transport == PolicySHM {
		return c, fmt.Errorf("config: memory private: the shm transport needs memfd memory (memory: memfd or auto)")
	}
	switch {
	case c.Conns == 0:
		c.Conns = DefaultConns
	case c.Conns < 0 || c.Conns > maxConns:
		return c, fmt.Errorf("config: conns %d: must be between 1 and %d", c.Conns, maxConns)
	}
	switch {
	case c.MaxMessage == 0:
		c.MaxMessage = DefaultMaxMessage
	case c.MaxMessage < 0 || c.MaxMessage > MaxMaxMessage:
		return c, fmt.Errorf("config: max_message %d: must be between 1 and %d", c.MaxMessage, MaxMaxMessage)
	}
	switch {
	case c.RecvDepth == 0:
		c.RecvDepth = DefaultRecvDepth
	case c.RecvDepth < 0 || c.RecvDepth > maxRecvDepth:
		return c, fmt.Errorf("config: recv_depth %d: must be between 1 and %d", c.RecvDepth, maxRecvDepth)
	}
	switch {
	case c.HandshakeTimeout == 0:
		c.HandshakeTimeout = DefaultHandshakeTimeout
	case c.HandshakeTimeout < 0:
		return c, fmt.Errorf("config: handshake_timeout %v: must be positive", c.HandshakeTimeout)
	}
	switch {
	case c.RDMAGIDIndex == "" || c.RDMAGIDIndex == "auto":
		c.RDMAGIDIndex = "auto"
	default:
		if n, err := strconv.Atoi(c.RDMAGIDIndex); err != nil || n < 0 || n > 255 {
			return c, fmt.Errorf("config: rdma_gid_index %q: must be auto or 0 to 255", c.RDMAGIDIndex)
		}
	}
	switch c.RDMAMTU {
	case 0, 256, 512, 1024, 2048, 4096:
	default:
		return c, fmt.Errorf("config: rdma_mtu %d: must be 256, 512, 1024, 2048 or 4096", c.RDMAMTU)
	}
	for key, v := range map[string]int{"rdma_port": c.RDMAPort, "rdma_max_inline_data": c.RDMAMaxInlineData,
		"rdma_max_send_wr": c.RDMAMaxSendWR, "rdma_max_recv_wr": c.RDMAMaxRecvWR, "rdma_max_sge": c.RDMAMaxSGE} {
		if v < 0 || v > 1<<16 {
			return c, fmt.Errorf("config: %s %d: must be between 0 (default) and 65536", key, v)
		}
	}
	switch {
	case c.PollSpin > time.Second:
		return c, fmt.Errorf("config: poll_spin %v: at most 1s", c.PollSpin)
	case c.PollSpin == 0:
		c.PollSpin = DefaultPollSpin
	case c.PollSpin < 0:
		c.PollSpin = -1
	}
	if c.RDMAPollSpin > time.Second {
		return c, fmt.Errorf("config: rdma_poll_spin %v: at most 1s", c.RDMAPollSpin)
	}
	if c.RDMAPollIdle > time.Minute {
		return c, fmt.Errorf("config: rdma_poll_idle %v: at most 1m (negative: never sleep)", c.RDMAPollIdle)
	}
	switch strings.ToLower(c.RDMAUseEventChannel) {
	case "true":
		c.RDMAUseEventChannel = "true"
	case "", "false":
		c.RDMAUseEventChannel = "false"
	default:
		return c, fmt.Errorf("config: rdma_use_event_channel %q: must be true or false", c.RDMAUseEventChannel)
	}
	switch strings.ToUpper(c.RDMAQPType) {
	case "", "RC":
		c.RDMAQPType = "RC"
	default:
		return c, fmt.Errorf("config: rdma_qp_type %q: only RC is supported", c.RDMAQPType)
	}
	if v := os.Getenv("XFER_DEVICE"); v != "" {
		c.RDMADevice = v
	} else if v := os.Getenv("RDMA_DEVICE_NAME"); v != "" && c.RDMADevice == "" {
		c.RDMADevice = v
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return c, nil
}

// verbs is the rdma transport's part of the configuration.
func (c Config) verbs() verbs.Config {
	gid := -1
	if c.RDMAGIDIndex != "auto" && c.RDMAGIDIndex != "" {
		gid, _ = strconv.Atoi(c.RDMAGIDIndex)
	}
	return verbs.Config{Device: c.RDMADevice, Port: c.RDMAPort, GIDIndex: gid, MTU: c.RDMAMTU,
		MaxInlineData: c.RDMAMaxInlineData, MaxSendWR: c.RDMAMaxSendWR, MaxRecvWR: c.RDMAMaxRecvWR,
		MaxSGE: c.RDMAMaxSGE, QPType: c.RDMAQPType, UseSRQ: c.RDMAUseSRQ, UseEventChannel: c.RDMAUseEventChannel == "true", PollSpin: c.RDMAPollSpin, PollIdle: c.RDMAPollIdle, UseCM: c.RDMAUseCM}
}
