package xfer

import (
	"strings"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/shm"
	"github.com/xferio/xfer/transport/tcp"
	"github.com/xferio/xfer/transport/verbs"
)

// The settings of the transports that have a section in Config.
type (
	// TCPConfig is the tcp transport's section (tcp: in a config file).
	TCPConfig = tcp.Config
	// RDMAConfig is the rdma transport's section (rdma: in a config file).
	RDMAConfig = verbs.Config
)

// transportRow is one transport of the engine's table: everything the
// engine, the handshake, status, metrics and the config need to know of it.
type transportRow struct {
	// name is the transport's name on the wire, in the config (policy and
	// section) and in metrics' labels.
	name string
	// open builds the engine's instance from its configuration.
	open func(cfg *Config) transport.Transport
	// section is the yaml key of its settings in Config ("" when it has
	// none); the config loader finds the section by this key.
	section string
	// device returns the device the configuration names for it ("" when
	// none, or when it has no devices): under the auto policy, a named
	// device that cannot be opened is a warning and a fallback.
	device func(cfg *Config) string
	// caps is what it can do: the variable of its package that its
	// Caps method returns, read here for what the engine needs before
	// any transport is built (TransportCaps, the memory policy).
	caps transport.Caps
	// peerGIDs returns the GIDs a peer's handshake blob for it gives (one
	// per device it connects over), for security.rdma.allowed_gids; nil
	// for a transport without GIDs.
	peerGIDs func(blob []byte) ([][16]byte, error)
}

// transportTable lists every transport once, best first: the order is the
// auto policy's preference (rank). Adding a transport means its package,
// its Caps, and one row here; nothing else in the root package names one.
var transportTable = []transportRow{
	{
		name:    "rdma",
		open:    func(cfg *Config) transport.Transport { return verbs.New(cfg.RDMA, cfg.Logger) },
		section: "rdma",
		device: func(cfg *Config) string {
			if len(cfg.RDMA.Devices) > 0 {
				return strings.Join(cfg.RDMA.Devices, ",") // rails
			}
			return cfg.RDMA.Device
		},
		caps: verbs.Caps,
		peerGIDs: func(blob []byte) ([][16]byte, error) {
			v, err := wire.DecodeVerbsInfo(blob)
			if err != nil {
				return nil, err
			}
			return append([][16]byte{v.GID}, v.RailGIDs...), nil
		},
	},
	{
		name: "shm",
		open: func(*Config) transport.Transport { return shm.New() },
		caps: shm.Caps,
	},
	{
		name:    "tcp",
		open:    func(*Config) transport.Transport { return tcp.New() },
		section: "tcp",
		caps:    tcp.Caps,
	},
}

// transportNames lists the table's names, best first.
func transportNames() []string {
	names := make([]string, len(transportTable))
	for i, r := range transportTable {
		names[i] = r.name
	}
	return names
}

// transportRowOf returns the row of the transport named, or nil.
func transportRowOf(name string) *transportRow {
	for i := range transportTable {
		if transportTable[i].name == name {
			return &transportTable[i]
		}
	}
	return nil
}

// rank orders the transports as auto prefers them, best first; a name
// outside the table (an extra transport) ranks after every row.
func rank(name string) int {
	for i, r := range transportTable {
		if r.name == name {
			return i
		}
	}
	return len(transportTable)
}

// TransportNames lists the transports this build knows, in the auto
// policy's order of preference: "rdma", "shm", "tcp".
func TransportNames() []string { return transportNames() }

// TransportCaps returns the capabilities of the transport named, as its
// package states them, and whether this build knows it, so that services
// choose by what a transport does, never by its name.
func TransportCaps(name string) (transport.Caps, bool) {
	if r := transportRowOf(name); r != nil {
		return r.caps, true
	}
	return transport.Caps{}, false
}

// TransportSections maps each transport that has settings of its own to
// the yaml key of its section in Config ("rdma", "tcp").
func TransportSections() map[string]string {
	m := map[string]string{}
	for _, r := range transportTable {
		if r.section != "" {
			m[r.name] = r.section
		}
	}
	return m
}

// policyMapsMemory reports whether a transport that maps peers' memory may
// serve an engine under policy p: the policy names such a transport, or
// is auto and the table has one.
func policyMapsMemory(p Policy) bool {
	for _, r := range transportTable {
		if r.caps.MapsMemory && (p == PolicyAuto || string(p) == r.name) {
			return true
		}
	}
	return false
}
