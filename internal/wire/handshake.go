package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Protocol versions this build speaks. Version 2 has the dialer prove
// first: the challenge carries only a random nonce, and the acceptor's
// identity and proof come in the welcome, after the dialer's proof checked.
// Version 1 sent the acceptor's proof to anyone who said hello; it is not
// spoken.
const (
	VersionMin = 2
	VersionMax = 2
)

// Handshake message framing: a 12-byte header (magic "XFER", type, three
// zero bytes, body length) followed by the body.
const (
	HandshakeHeaderLen = 12
	// MaxHandshakeBody bounds every handshake message body.
	MaxHandshakeBody = 1 << 20
)

var magic = [4]byte{'X', 'F', 'E', 'R'}

// MsgType is the type of a handshake message.
type MsgType uint8

const (
	MsgHello     MsgType = 1 // dialer → acceptor, opens a peer connection
	MsgChallenge MsgType = 2 // acceptor → dialer
	MsgAuth      MsgType = 3 // dialer → acceptor, proof of the secret
	MsgWelcome   MsgType = 4 // acceptor → dialer, the peer is established
	MsgResult    MsgType = 5 // a refusal, or the answer to a join
	MsgJoin      MsgType = 6 // dialer → acceptor, adds a connection to a peer
	MsgVerbs     MsgType = 7 // both ways, rdma transport: QP numbers and addresses
)

// Limits.
const (
	MaxTransports   = 8
	MaxBlob         = 4096
	MaxNameLen      = 256
	MaxMessageText  = 1024
	MaxExports      = 1024
	MaxAddrLen      = 256
	maxTransportLen = 16
)

// Capability bits.
const (
	CapAuth   uint64 = 1 << 0 // can authenticate with a shared secret
	CapNotify uint64 = 1 << 1 // write-with-notify
	CapAttach uint64 = 1 << 2 // region attach (shm)
	// CapResume, in a Hello, says that Resume follows the transports: the
	// dialer asks the acceptor to put the new connection under the peer
	// of the connection whose Welcome carried that token, replacing it.
	CapResume uint64 = 1 << 3
	// CapExports, in a Hello or a Challenge, says that this side takes
	// FrameExport on the connection's stream: regions exported after the
	// handshake reach it.
	CapExports uint64 = 1 << 4
	// CapReady, in a Challenge, says that the acceptor's owner declared it
	// ready before this handshake: the Welcome's exports are complete, and
	// a name it does not list is absent, not on its way.
	CapReady uint64 = 1 << 5
)

// TransportOffer is one transport the dialer can use, with its handshake data.
type TransportOffer struct {
	Name string
	Blob []byte
}

// Hello opens a peer connection.
type Hello struct {
	MinVersion, MaxVersion uint16
	Caps                   uint64
	ID                     [16]byte
	HostID                 [16]byte
	PID                    uint32
	Nonce                  [32]byte
	Policy                 string // auto, tcp, shm, rdma
	Conns                  uint16
	MaxMessage             uint32
	RecvDepth              uint32
	Listen                 string
	Transports             []TransportOffer
	// Resume, with CapResume, is the Welcome token of the dialer's
	// current connection to this acceptor (see CapResume).
	Resume [16]byte
}

// Challenge answers Hello with the acceptor's nonce: nothing derived from
// the secret and nothing that identifies the acceptor, which an
// unauthenticated dialer must not learn.
type Challenge struct {
	Version      uint16
	Caps         uint64
	Nonce        [32]byte
	AuthRequired bool
}

// Auth carries the dialer's proof.
type Auth struct {
	Proof [32]byte
}

// Export is a region the acceptor advertises by name.
type Export struct {
	Name string
	Desc RegionDesc
}

// MaxExportLen bounds an encoded Export (AppendExport): a name of up to
// MaxNameLen bytes with its length, and a descriptor.
const MaxExportLen = 2 + MaxNameLen + RegionDescLen

// AppendExport appends x's encoding, the payload of a FrameExport: the name
// (a 2-byte length and its bytes) and the region descriptor.
func AppendExport(b []byte, x *Export) []byte {
	e := &enc{b: b}
	e.str(x.Name)
	e.b = AppendRegionDesc(e.b, &x.Desc)
	return e.b
}

// DecodeExport decodes a FrameExport's payload. The name is not empty.
func DecodeExport(b []byte) (Export, error) {
	d := &dec{b: b, what: "export"}
	var x Export
	x.Name = d.str(MaxNameLen, "name")
	if d.err == nil && x.Name == "" {
		d.fail("empty name")
	}
	raw := d.take(RegionDescLen, "descriptor")
	if d.err == nil {
		desc, err := DecodeRegionDesc(raw)
		if err != nil {
			return Export{}, err
		}
		x.Desc = desc
	}
	if err := d.done(); err != nil {
		return Export{}, err
	}
	return x, nil
}

// Welcome establishes the peer. It is sent only to a dialer that proved
// the secret, when the acceptor has one.
type Welcome struct {
	// Proof is the acceptor's HMAC over the handshake so far and this
	// welcome (with Proof zero); all zero without a secret. It is the
	// first field, at WelcomeProofOffset in the body, so that the dialer
	// can zero it to check it.
	Proof      [32]byte
	ID         [16]byte
	HostID     [16]byte
	PID        uint32
	Transport  string
	Blob       []byte
	Conns      uint16
	MaxMessage uint32
	RecvDepth  uint32
	Token      [16]byte // lets the dialer join more connections to this peer
	Listen     string
	Exports    []Export
}

// Status codes of Result and of frame responses.
type Status uint8

const (
	StatusOK Status = iota
	StatusUnknownRegion
	StatusWrongKey
	StatusNoAccess
	StatusOutOfRange
	StatusTooLarge
	StatusBadRequest
	StatusClosed
	StatusAuthFailed
	StatusVersion
	StatusNoTransport
	StatusInternal
	statusMax
)

var statusText = [...]string{
	StatusOK:            "ok",
	StatusUnknownRegion: "unknown region",
	StatusWrongKey:      "wrong key",
	StatusNoAccess:      "access denied",
	StatusOutOfRange:    "out of range",
	StatusTooLarge:      "too large",
	StatusBadRequest:    "bad request",
	StatusClosed:        "closed",
	StatusAuthFailed:    "authentication failed",
	StatusVersion:       "no common protocol version",
	StatusNoTransport:   "no common transport",
	StatusInternal:      "internal error",
}

func (s Status) String() string {
	if s < statusMax {
		return statusText[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Result refuses a peer, or answers a join.
type Result struct {
	Status  Status
	Message string
}

// Join adds a connection to an established peer.
type Join struct {
	Token [16]byte
	Index uint16
}

// AppendHello appends m's encoding (with its header) to b.
func AppendHello(b []byte, m *Hello) []byte {
	e, at := begin(b, MsgHello)
	e.u16(m.MinVersion)
	e.u16(m.MaxVersion)
	e.u64(m.Caps)
	e.raw(m.ID[:])
	e.raw(m.HostID[:])
	e.u32(m.PID)
	e.raw(m.Nonce[:])
	e.str(m.Policy)
	e.u16(m.Conns)
	e.u32(m.MaxMessage)
	e.u32(m.RecvDepth)
	e.str(m.Listen)
	e.u8(uint8(len(m.Transports)))
	for _, t := range m.Transports {
		e.str(t.Name)
		e.bytes16(t.Blob)
	}
	if m.Caps&CapResume != 0 {
		e.raw(m.Resume[:])
	}
	return finish(e, at)
}

// DecodeHello decodes a Hello body.
func DecodeHello(body []byte) (*Hello, error) {
	d := &dec{b: body, what: "hello"}
	m := &Hello{}
	m.MinVersion = d.u16("min version")
	m.MaxVersion = d.u16("max version")
	m.Caps = d.u64("caps")
	d.fixed(m.ID[:], "id")
	d.fixed(m.HostID[:], "host id")
	m.PID = d.u32("pid")
	d.fixed(m.Nonce[:], "nonce")
	m.Policy = d.str(maxTransportLen, "policy")
	m.Conns = d.u16("conns")
	m.MaxMessage = d.u32("max message")
	m.RecvDepth = d.u32("recv depth")
	m.Listen = d.str(MaxAddrLen, "listen")
	n := int(d.u8("transport count"))
	if d.err == nil && n > MaxTransports {
		d.fail("%d transports, limit %d", n, MaxTransports)
	}
	for i := 0; i < n && d.err == nil; i++ {
		var t TransportOffer
		t.Name = d.str(maxTransportLen, "transport name")
		t.Blob = d.bytes16(MaxBlob, "transport blob")
		m.Transports = append(m.Transports, t)
	}
	if m.Caps&CapResume != 0 {
		d.fixed(m.Resume[:], "resume token")
	}
	if d.err == nil && m.MinVersion > m.MaxVersion {
		d.fail("min version %d > max version %d", m.MinVersion, m.MaxVersion)
	}
	return m, d.done()
}

// AppendChallenge appends m's encoding to b.
func AppendChallenge(b []byte, m *Challenge) []byte {
	e, at := begin(b, MsgChallenge)
	e.u16(m.Version)
	e.u64(m.Caps)
	e.raw(m.Nonce[:])
	e.u8(boolByte(m.AuthRequired))
	return finish(e, at)
}

// DecodeChallenge decodes a Challenge body.
func DecodeChallenge(body []byte) (*Challenge, error) {
	d := &dec{b: body, what: "challenge"}
	m := &Challenge{}
	m.Version = d.u16("version")
	m.Caps = d.u64("caps")
	d.fixed(m.Nonce[:], "nonce")
	m.AuthRequired = d.boolean("auth required")
	return m, d.done()
}

// AppendAuth appends m's encoding to b.
func AppendAuth(b []byte, m *Auth) []byte {
	e, at := begin(b, MsgAuth)
	e.raw(m.Proof[:])
	return finish(e, at)
}

// DecodeAuth decodes an Auth body.
func DecodeAuth(body []byte) (*Auth, error) {
	d := &dec{b: body, what: "auth"}
	m := &Auth{}
	d.fixed(m.Proof[:], "proof")
	return m, d.done()
}

// WelcomeProofOffset is where Welcome.Proof lies in a welcome's body.
const WelcomeProofOffset = 0

// AppendWelcome appends m's encoding to b.
func AppendWelcome(b []byte, m *Welcome) []byte {
	e, at := begin(b, MsgWelcome)
	e.raw(m.Proof[:])
	e.raw(m.ID[:])
	e.raw(m.HostID[:])
	e.u32(m.PID)
	e.str(m.Transport)
	e.bytes16(m.Blob)
	e.u16(m.Conns)
	e.u32(m.MaxMessage)
	e.u32(m.RecvDepth)
	e.raw(m.Token[:])
	e.str(m.Listen)
	e.u16(uint16(len(m.Exports)))
	for _, x := range m.Exports {
		e.str(x.Name)
		e.b = AppendRegionDesc(e.b, &x.Desc)
	}
	return finish(e, at)
}

// DecodeWelcome decodes a Welcome body.
func DecodeWelcome(body []byte) (*Welcome, error) {
	d := &dec{b: body, what: "welcome"}
	m := &Welcome{}
	d.fixed(m.Proof[:], "proof")
	d.fixed(m.ID[:], "id")
	d.fixed(m.HostID[:], "host id")
	m.PID = d.u32("pid")
	m.Transport = d.str(maxTransportLen, "transport")
	m.Blob = d.bytes16(MaxBlob, "blob")
	m.Conns = d.u16("conns")
	m.MaxMessage = d.u32("max message")
	m.RecvDepth = d.u32("recv depth")
	d.fixed(m.Token[:], "token")
	m.Listen = d.str(MaxAddrLen, "listen")
	n := int(d.u16("export count"))
	if d.err == nil && n > MaxExports {
		d.fail("%d exports, limit %d", n, MaxExports)
	}
	for i := 0; i < n && d.err == nil; i++ {
		var x Export
		x.Name = d.str(MaxNameLen, "export name")
		raw := d.take(RegionDescLen, "export descriptor")
		if d.err == nil {
			desc, err := DecodeRegionDesc(raw)
			if err != nil {
				d.err = err
				break
			}
			x.Desc = desc
		}
		m.Exports = append(m.Exports, x)
	}
	return m, d.done()
}

// AppendResult appends m's encoding to b.
func AppendResult(b []byte, m *Result) []byte {
	e, at := begin(b, MsgResult)
	e.u8(uint8(m.Status))
	msg := m.Message
	if len(msg) > MaxMessageText {
		msg = msg[:MaxMessageText]
	}
	e.str(msg)
	return finish(e, at)
}

// DecodeResult decodes a Result body.
func DecodeResult(body []byte) (*Result, error) {
	d := &dec{b: body, what: "result"}
	m := &Result{}
	m.Status = Status(d.u8("status"))
	m.Message = d.str(MaxMessageText, "message")
	return m, d.done()
}

// AppendJoin appends m's encoding to b.
func AppendJoin(b []byte, m *Join) []byte {
	e, at := begin(b, MsgJoin)
	e.raw(m.Token[:])
	e.u16(m.Index)
	return finish(e, at)
}

// DecodeJoin decodes a Join body.
func DecodeJoin(body []byte) (*Join, error) {
	d := &dec{b: body, what: "join"}
	m := &Join{}
	d.fixed(m.Token[:], "token")
	m.Index = d.u16("index")
	return m, d.done()
}

// ReadMessage reads one handshake message, checking the magic and the
// length limit before it allocates. It returns the type and body.
func ReadMessage(r io.Reader) (MsgType, []byte, error) {
	var h [HandshakeHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	t, n, err := DecodeMessageHeader(h[:])
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return t, body, nil
}

// DecodeMessageHeader checks a handshake message header.
func DecodeMessageHeader(h []byte) (MsgType, int, error) {
	if len(h) < HandshakeHeaderLen {
		return 0, 0, fmt.Errorf("%w: handshake header: %d bytes", ErrMalformed, len(h))
	}
	if [4]byte(h[:4]) != magic {
		return 0, 0, fmt.Errorf("%w: handshake header: bad magic %q (not an xfer peer?)", ErrMalformed, h[:4])
	}
	t := MsgType(h[4])
	if t < MsgHello || t > MsgVerbs {
		return 0, 0, fmt.Errorf("%w: handshake header: unknown message type %d", ErrMalformed, t)
	}
	if h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return 0, 0, fmt.Errorf("%w: handshake header: reserved bytes set", ErrMalformed)
	}
	n := binary.LittleEndian.Uint32(h[8:12])
	if n > MaxHandshakeBody {
		return 0, 0, fmt.Errorf("%w: handshake header: body of %d bytes, limit %d", ErrMalformed, n, MaxHandshakeBody)
	}
	return t, int(n), nil
}

func begin(b []byte, t MsgType) (*enc, int) {
	at := len(b)
	e := &enc{b: b}
	e.raw(magic[:])
	e.u8(uint8(t))
	e.raw([]byte{0, 0, 0})
	e.u32(0)
	return e, at
}

func finish(e *enc, at int) []byte {
	binary.LittleEndian.PutUint32(e.b[at+8:], uint32(len(e.b)-at-HandshakeHeaderLen))
	return e.b
}

func boolByte(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

func (d *dec) boolean(field string) bool {
	switch v := d.u8(field); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("%s: %d is not a boolean", field, v)
		return false
	}
}
