package transferctl

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/xferio/xfer/connector"
)

// DefaultPort is the control channel's port unless --ctrl-port says
// otherwise.
const DefaultPort = 15501

// MaxLine bounds one message, its line feed included.
const MaxLine = 64 << 10

// The message types (a message's "type" member).
const (
	TypeHello = "hello" // producer → consumer: the run
	TypeReady = "ready" // consumer → producer: the run is agreed
	TypePut   = "put"   // producer → consumer: a tensor is there
	TypeGot   = "got"   // consumer → producer: the tensor was got
	TypeError = "error" // either side: it gives up, and why
)

// The authentication messages' types (with a secret; see the package
// documentation and auth.go).
const (
	TypeChallenge = "challenge" // producer → consumer: the producer's nonce
	TypeAuth      = "auth"      // consumer → producer: its nonce and proof; producer → consumer: its proof
)

// Msg is one control message; the members in use depend on Type (see the
// package documentation).
type Msg struct {
	Type string `json:"type"`

	// hello
	Transfers int    `json:"transfers,omitempty"`
	Bytes     int64  `json:"bytes,omitempty"`
	DType     string `json:"dtype,omitempty"`
	Mode      string `json:"mode,omitempty"`
	Benchmark bool   `json:"benchmark,omitempty"`

	// ready
	Pull string `json:"pull,omitempty"`

	// put and got
	Seq        int             `json:"seq,omitempty"`
	Meta       *connector.Meta `json:"meta,omitempty"`
	MD5        string          `json:"md5,omitempty"`
	PutSeconds float64         `json:"put_seconds,omitempty"`
	MD5OK      *bool           `json:"md5_ok,omitempty"`
	Seconds    float64         `json:"seconds,omitempty"`
	Transport  string          `json:"transport,omitempty"`

	// error
	Error string `json:"error,omitempty"`

	// challenge and auth
	Nonce string `json:"nonce,omitempty"`
	Proof string `json:"proof,omitempty"`
}

// Encode returns m as one line: compact JSON, UTF-8 as it is (no HTML
// escapes), and a line feed.
func Encode(m Msg) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil { // compact, and ends in a line feed
		return nil, fmt.Errorf("control channel: encoding a %q message: %w", m.Type, err)
	}
	if b.Len() > MaxLine {
		return nil, fmt.Errorf("control channel: a %q message of %d bytes, more than %d", m.Type, b.Len(), MaxLine)
	}
	return b.Bytes(), nil
}

// Decode parses one line (its line feed optional) into a message. It
// checks the framing, not the conversation: any type is returned.
func Decode(line []byte) (Msg, error) {
	if len(line) > MaxLine {
		return Msg{}, fmt.Errorf("control channel: a message longer than %d bytes", MaxLine)
	}
	m, err := decode(line)
	if err != nil {
		return Msg{}, fmt.Errorf("control channel: a malformed message: %w", err)
	}
	return m, nil
}

// decode parses a line of at most MaxLine bytes.
func decode(line []byte) (Msg, error) {
	var m Msg
	if err := json.Unmarshal(line, &m); err != nil {
		return Msg{}, err
	}
	return m, nil
}
