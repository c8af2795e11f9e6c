package xfer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/dirconfig"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
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

// ParsePolicy parses "auto" or a transport's name: "rdma", "shm" or "tcp"
// ("" means auto).
func ParsePolicy(s string) (Policy, error) {
	p := Policy(strings.ToLower(strings.TrimSpace(s)))
	switch {
	case p == "":
		return PolicyAuto, nil
	case p == PolicyAuto || transportRowOf(string(p)) != nil:
		return p, nil
	}
	return "", fmt.Errorf("transport %q: %w", s, errPolicy)
}

var errPolicy = errors.New("must be one of auto, " + strings.Join(transportNames(), ", "))

// MarshalText implements encoding.TextMarshaler ("" is auto).
func (p Policy) MarshalText() ([]byte, error) {
	q, err := ParsePolicy(string(p))
	if err != nil {
		return nil, err
	}
	return []byte(q), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParsePolicy. Its
// error says what is allowed; the caller names the key and the value.
func (p *Policy) UnmarshalText(text []byte) error {
	q, err := ParsePolicy(string(text))
	if err != nil {
		return errPolicy
	}
	*p = q
	return nil
}

// MemoryBacking is what backs an engine's memory (Config.Memory): memfd,
// private or auto, mem's Backing.
type MemoryBacking = mem.Backing

const (
	// MemoryAuto is memfd under the auto and shm policies, private under
	// tcp and rdma. The empty MemoryBacking means it.
	MemoryAuto = mem.BackingAuto
	// MemoryMemfd is shared memory: same-host peers can map it (the shm
	// transport), and over tcp a WRITE of 64 KiB or more leaves by
	// reference, without a copy, with sendfile.
	MemoryMemfd = mem.BackingMemfd
	// MemoryPrivate is anonymous memory with transparent huge pages, which
	// a receiving socket copies into faster.
	MemoryPrivate = mem.BackingPrivate
)

// ParseMemoryBacking parses "auto", "memfd" or "private" ("" means auto),
// or a GPU, "cuda:N": memory on GPU N, a shorthand for
// Config.MemoryDevice that Open moves there.
func ParseMemoryBacking(s string) (MemoryBacking, error) { return mem.ParseBacking(s) }

// Config configures an Engine: one Config per layer. The engine's own
// settings are fields of Config; each transport that has settings of its
// own brings its Config (TCP, RDMA), with its defaults and validation in
// its package. In a config file these are the tcp and rdma mappings, and
// package config also accepts their keys at the top level as they were
// before (conns, poll_spin, rdma_device, ...).
//
// The settings every transport shares (max_message, recv_depth,
// handshake_timeout) stay fields of Config itself: the engine negotiates
// them with each peer in its handshake and hands the results to whichever
// transport the handshake chose (transport.Params), so they are the
// engine's, not a transport's.
//
// The zero value of every field means the documented default, so Config{}
// is a valid configuration of an engine that does not listen. Open checks
// the configuration; its errors name the key ("config: memory_mb -1: ...",
// "config: rdma.gid_index 300: ..."). Engine.Config returns it with every
// default filled in.
type Config struct {
	// Listen is the TCP address the engine accepts peers on, e.g.
	// "127.0.0.1:7471" or ":0". Default: empty, the engine only dials.
	Listen string `yaml:"listen"`
	// HoldPeers, with Listen, has Open bind the address but answer no
	// handshake until Engine.Ready is called: an owner that exports
	// regions or starts a service after Open calls Ready once everything a
	// peer may ask for is in place. A peer that dials meanwhile is held,
	// within the acceptor's handshake_timeout, and refused as not ready
	// after it. Not a config file key. Default: false, the engine is ready
	// when Open returns.
	HoldPeers bool `yaml:"-"`
	// Advertise is the address peers should use to reach this engine, when it
	// differs from Listen (NAT, wildcard listen). Default: the listen address.
	Advertise string `yaml:"advertise"`
	// Directory is where the engine registers itself (with NodeID) and
	// looks other nodes up (DialNode): "p2p" (no directory: peers are dialed
	// by address), "http://HOST:PORT" (an xfer coordinator) or
	// "etcd://HOST:2379[,HOST:2379...]/PREFIX". See package directory.
	// Default: p2p.
	Directory string `yaml:"directory"`
	// NodeID is the engine's node ID in the directory: 1 to 128 characters
	// of [A-Za-z0-9._-]. With a directory, an engine that listens and has a
	// node ID registers itself on Open (its advertised address, transports,
	// exports), keeps the entry alive, and removes it on Close. It needs a
	// directory and a listen address. Default: none; the engine does not
	// register, and can still DialNode.
	NodeID string `yaml:"node_id"`
	// DirectoryTTL is how long the engine's entry outlives its last
	// heartbeat (coordinator) or lease renewal (etcd, which rounds it up to
	// whole seconds): how long a node that died without closing stays
	// listed. Between 100ms and 10m. Default: 10s.
	DirectoryTTL time.Duration `yaml:"directory_ttl"`
	// DirectoryTokenFile names a file holding the coordinator's token
	// (the coordinator's --token-file), which the engine sends with its
	// requests: a coordinator with a token refuses writes without it.
	// etcd's users and passwords go in the directory URL
	// (etcd://USER:PASSWORD@HOST:2379/PREFIX). Default: none.
	DirectoryTokenFile string `yaml:"directory_token_file"`
	// DirectoryTLSCert and DirectoryTLSKey name the PEM files of the
	// client certificate and key that an etcd with client-certificate
	// authentication (its --client-cert-auth) requires; both or neither.
	// Any of the directory_tls_* keys makes the client speak TLS with the
	// directory (etcd, or an https coordinator). An etcd URL may name the
	// files instead (etcd://HOST:2379/PREFIX?cert=FILE&key=FILE&ca=FILE).
	// Default: none.
	DirectoryTLSCert string `yaml:"directory_tls_cert"`
	// DirectoryTLSKey is the key of DirectoryTLSCert. Default: none.
	DirectoryTLSKey string `yaml:"directory_tls_key"`
	// DirectoryTLSCA names the PEM file of the CA that signed the
	// directory's server certificate. Default: the system's roots.
	DirectoryTLSCA string `yaml:"directory_tls_ca"`
	// Transport is the transport policy. Default: auto.
	Transport Policy `yaml:"transport"`
	// MemoryMB is the size of the engine's default registered pool, in MiB.
	// Default: 64 (DefaultMemoryMB); at most 1048576.
	MemoryMB int `yaml:"memory_mb"`
	// HugePages is how the engine's memory asks for huge pages: auto
	// (transparent huge pages where the kernel allows), off, or explicit
	// (hugetlbfs pages, which must be reserved). Default: auto.
	HugePages mem.HugePages `yaml:"huge_pages"`
	// Memory is what backs the engine's memory (its pool and NewRegion's
	// regions): memfd, private or auto (see MemoryBacking). The shm policy
	// needs memfd. Default: auto.
	Memory MemoryBacking `yaml:"memory"`
	// MemoryDevice is where the engine's default pool lives: host memory,
	// or GPU memory (cuda:N), which Alloc then hands out and every
	// transport moves (docs/GPU.md). GPU memory needs a CUDA driver;
	// without one Open fails with an error matching ErrCUDANotAvailable.
	// Default: host.
	MemoryDevice mem.Location `yaml:"memory_device"`
	// Secret, when set, makes the handshake authenticate both sides with a
	// challenge and response (HMAC-SHA256); the secret never crosses the
	// wire, and the dialer proves it first: a peer that does not know it
	// gets nothing that depends on it, nor this engine's identity. It must
	// have at least MinSecretLen (16) bytes; GenerateSecret (`xfer
	// secret`) makes one. Prefer SecretFile: a secret in a config file or
	// on a command line is easily shown. Default: none.
	Secret string `yaml:"secret"`
	// SecretFile names a file that holds the secret (surrounding white
	// space is ignored); WithDefaults and Open read it into Secret. With
	// Secret also set, the two must agree. Default: none.
	SecretFile string `yaml:"secret_file"`
	// Security is the policy over who may connect (require_authentication,
	// allowed_peers, rdma.allowed_gids). Default: SecurityConfig's
	// defaults, which allow everyone.
	Security SecurityConfig `yaml:"security"`
	// MaxMessage is the largest Send payload in bytes. Default: 64 KiB
	// (DefaultMaxMessage); at most 16 MiB (MaxMaxMessage).
	MaxMessage int `yaml:"max_message"`
	// RecvDepth is how many received messages may wait in a peer's receive
	// queue before senders wait. Default: 128 (DefaultRecvDepth); at most
	// 65536.
	RecvDepth int `yaml:"recv_depth"`
	// HandshakeTimeout bounds Dial's handshake and an inbound peer's
	// handshake. Default: 10s (DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// OpTimeout bounds how long a peer may make no progress while this
	// engine has operations outstanding with it: no byte acknowledged or
	// received, no completion. Past it the peer is stalled (stopped, hung,
	// cut off without a reset): its connection is closed, and every
	// operation outstanding on it fails with an error that matches
	// ErrStalled and names the peer and the timeout; a dialed peer
	// reconnects on its next operation. A large operation on a slow link
	// is not cut short, since its bytes keep moving. It applies whatever
	// the operation's context says (a context deadline bounds one call;
	// this bounds the peer's silence). Default: 10s (DefaultOpTimeout);
	// at least 10ms; negative turns the check off.
	OpTimeout time.Duration `yaml:"op_timeout"`
	// ReconnectWait bounds how long a dialed peer whose address refuses or
	// resets connections (its process died, or is restarting) is dialed
	// again, with backoff: the operation that needed it fails within it
	// (after the last dial that the backoff's next pause would not carry
	// past it) with a *ReconnectError that names the peer, the refusal and
	// how long it tried. A peer back within it carries on; one that stays down fails
	// each later operation after a single dial, at once. It bounds the
	// dead, as OpTimeout bounds the silent, whatever the operation's
	// context says. Default: 2s (DefaultReconnectWait); negative: no
	// retry, the first refusal fails the operation.
	ReconnectWait time.Duration `yaml:"reconnect_wait"`
	// TCP configures the tcp transport's connections (conns, poll_spin);
	// its poll_spin also applies to the control connection of shm and rdma.
	// Default: TCPConfig's defaults.
	TCP TCPConfig `yaml:"tcp"`
	// RDMA configures the rdma transport (device, port, gid_index, queue
	// sizes, polling). Default: RDMAConfig's defaults, which open the
	// first device with an ACTIVE port. The library reads no environment
	// variables; the xfer command lets XFER_DEVICE, and RDMA_DEVICE_NAME
	// when nothing else names a device, set RDMA.Device.
	RDMA RDMAConfig `yaml:"rdma"`
	// Logger receives the engine's logs. Not a config file key. Default: a
	// text logger on standard error at warn level.
	Logger *slog.Logger `yaml:"-"`
	// ExtraTransport, when set, gives the engine one more transport than
	// its table has: Open calls it once, Dial offers the transport first
	// and the handshake accepts it whatever the policy. It is for running
	// engines over a transport that is not built in, such as the
	// in-memory twin of package transport/twin in tests; the engine treats
	// it as moving host memory over one connection. Its name must not be a
	// built-in transport's. Not a config file key. Default: none.
	ExtraTransport func() transport.Transport `yaml:"-"`
	// Metrics, when set, is where the engine registers its Prometheus
	// metrics (xfer_ops_total, xfer_op_duration_seconds, ...; the list is
	// in docs/OPERATIONS.md); Close unregisters them. The engine never
	// touches the global registry. Two engines on one registry need
	// distinct labels: wrap it for each with prometheus.WrapRegistererWith. Not a
	// config file key. Default: nil, no metrics, and nothing on the
	// operations' path but a nil check.
	Metrics prometheus.Registerer `yaml:"-"`
}

// Defaults.
const (
	DefaultMemoryMB         = 64
	DefaultMaxMessage       = 64 << 10
	MaxMaxMessage           = 16 << 20
	DefaultRecvDepth        = 128
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultOpTimeout is Config.OpTimeout's default.
	DefaultOpTimeout = 10 * time.Second
	// minOpTimeout is the shortest Config.OpTimeout: the watchdog looks
	// at each peer eight times per timeout.
	minOpTimeout = 10 * time.Millisecond
	// DefaultReconnectWait is Config.ReconnectWait's default.
	DefaultReconnectWait = 2 * time.Second
	DefaultDirectoryTTL  = dirconfig.DefaultTTL
	maxMemoryMB          = 1 << 20
	maxRecvDepth         = 1 << 16
)

// Clone returns a copy of c that shares nothing with it but the Logger and
// the Metrics registerer.
func (c Config) Clone() Config {
	c.TCP = c.TCP.Clone()
	c.RDMA = c.RDMA.Clone()
	c.Security = c.Security.Clone()
	return c
}

// WithDefaults validates c and returns it with every default filled in,
// its own and each transport's, as Open uses it; c is not changed. Its
// errors name the key ("config: memory_mb -1: ..."). It opens nothing but
// secret_file, which it reads into Secret: a
// device or a directory that cannot be reached is Open's error, not its.
// Package config checks a decoded document with it.
func (c Config) WithDefaults() (Config, error) { return c.withDefaults() }

// withDefaults validates c and fills in defaults, its own and each
// transport's. Errors name the key.
func (c Config) withDefaults() (Config, error) {
	c = c.Clone()
	var err error
	if c.Transport, err = ParsePolicy(string(c.Transport)); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if err := c.checkDirectory(); err != nil {
		return c, err
	}
	if err := c.checkSecret(); err != nil {
		return c, err
	}
	if err := c.checkSecurity(); err != nil {
		return c, err
	}
	switch {
	case c.MemoryMB == 0:
		c.MemoryMB = DefaultMemoryMB
	case c.MemoryMB < 0 || c.MemoryMB > maxMemoryMB:
		return c, fmt.Errorf("config: memory_mb %d: must be between 1 and %d", c.MemoryMB, maxMemoryMB)
	}
	if _, err := c.HugePages.MarshalText(); err != nil {
		return c, fmt.Errorf("config: huge_pages %d: must be auto, off or explicit", int(c.HugePages))
	}
	if c.Memory, err = ParseMemoryBacking(string(c.Memory)); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if loc, err := mem.ParseLocation(string(c.Memory)); err == nil && !loc.IsHost() {
		// memory: cuda:N is memory_device: cuda:N.
		if !c.MemoryDevice.IsHost() && c.MemoryDevice != loc {
			return c, fmt.Errorf("config: memory %s and memory_device %s name different GPUs", loc, c.MemoryDevice)
		}
		c.MemoryDevice, c.Memory = loc, MemoryAuto
	}
	if _, known := c.MemoryDevice.Kind.Info(); !known || c.MemoryDevice.Device < 0 || c.MemoryDevice.Device > 255 {
		return c, fmt.Errorf("config: memory_device %s: must be host or cuda:N with N from 0 to 255", c.MemoryDevice)
	}
	if r := transportRowOf(string(c.Transport)); c.Memory == MemoryPrivate && r != nil && r.caps.MapsMemory {
		return c, fmt.Errorf("config: memory private: the %s transport needs memfd memory (memory: memfd or auto)", r.name)
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
	case c.OpTimeout == 0:
		c.OpTimeout = DefaultOpTimeout
	case c.OpTimeout > 0 && c.OpTimeout < minOpTimeout:
		return c, fmt.Errorf("config: op_timeout %v: must be at least %v, or negative for none", c.OpTimeout, minOpTimeout)
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = DefaultReconnectWait
	}
	if c.TCP, err = c.TCP.WithDefaults(); err != nil {
		return c, err
	}
	if c.RDMA, err = c.RDMA.WithDefaults(); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return c, nil
}

// DirectoryToken returns the coordinator's token from
// DirectoryTokenFile, or "" without one.
func (c Config) DirectoryToken() (string, error) { return dirconfig.Token(c.DirectoryTokenFile) }

// DirectoryTLS returns the directory client's TLS configuration
// (directory.Options.TLS) from DirectoryTLSCert, DirectoryTLSKey and
// DirectoryTLSCA, or nil without them.
func (c Config) DirectoryTLS() (*tls.Config, error) {
	return dirconfig.TLS(c.DirectoryTLSCert, c.DirectoryTLSKey, c.DirectoryTLSCA)
}

// checkDirectory validates and fills in directory, node_id and
// directory_ttl (internal/dirconfig). The directory itself is reached only
// by Open.
func (c *Config) checkDirectory() error {
	dir, ttl, err := dirconfig.Check(dirconfig.Keys{Directory: c.Directory, NodeID: c.NodeID, Listen: c.Listen,
		TTL: c.DirectoryTTL, TLSCert: c.DirectoryTLSCert, TLSKey: c.DirectoryTLSKey})
	if err != nil {
		return err
	}
	c.Directory, c.DirectoryTTL = dir, ttl
	return nil
}

// checkSecret resolves secret_file and checks the secret's length. The
// error never shows the secret.
func (c *Config) checkSecret() error {
	if c.SecretFile != "" {
		s, err := auth.ReadSecretFile("secret_file", "secret", c.SecretFile)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if c.Secret != "" && c.Secret != s {
			return fmt.Errorf("config: secret and secret_file %s both set, and differ: use one of them", c.SecretFile)
		}
		c.Secret = s
	}
	if err := auth.CheckSecret(c.Secret); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// checkSecurity validates the security section and fills in its defaults.
func (c *Config) checkSecurity() error {
	if (c.Security.RequireAuthentication || c.Security.RDMA.RequireAuthentication) && c.Secret == "" {
		return fmt.Errorf("config: security.require_authentication is set and there is no secret: generate one with `xfer secret > FILE` and set secret_file: FILE")
	}
	if _, err := parseAllowedPeers(c.Security.AllowedPeers); err != nil {
		return err
	}
	switch {
	case c.Security.MaxPendingHandshakes == 0:
		c.Security.MaxPendingHandshakes = DefaultMaxPendingHandshakes
	case c.Security.MaxPendingHandshakes < 0:
		return fmt.Errorf("config: security.max_pending_handshakes %d: must be positive", c.Security.MaxPendingHandshakes)
	}
	switch {
	case c.Security.MaxPendingPerSource == 0:
		c.Security.MaxPendingPerSource = min(DefaultMaxPendingPerSource, c.Security.MaxPendingHandshakes)
	case c.Security.MaxPendingPerSource < 0:
		return fmt.Errorf("config: security.max_pending_per_source %d: must be positive", c.Security.MaxPendingPerSource)
	case c.Security.MaxPendingPerSource > c.Security.MaxPendingHandshakes:
		return fmt.Errorf("config: security.max_pending_per_source %d: must not exceed security.max_pending_handshakes (%d)", c.Security.MaxPendingPerSource, c.Security.MaxPendingHandshakes)
	}
	if _, err := parseGIDs(c.Security.RDMA.AllowedGIDs); err != nil {
		return err
	}
	return nil
}
