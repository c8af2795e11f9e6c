package transferctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/auth"
)

// Conn is one end of the control channel. It is for one goroutine.
type Conn struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
	peer    string // "producer" or "consumer": the other side
	stop    func() bool

	// After authentication (a secret), every line carries a MAC: skey
	// makes those sent, rkey checks those received; sent and received
	// count the lines.
	skey, rkey     []byte
	sent, received uint64

	// ticket is the connection's place in Serve's gate during its
	// handshake; nil after it.
	ticket *admit.Ticket
}

// AuthError is a connection that did not authenticate; Reason is one of
// the engine's refusal reasons (no_proof, bad_proof, malformed, timeout).
type AuthError struct {
	Reason string
	Err    error
}

func (e *AuthError) Error() string { return e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// ReasonEvicted is the reason Refused is given for a connection dropped,
// still in its handshake, to make room for a newer one.
const ReasonEvicted = "evicted"

// ReasonBusy is the reason Refused is given for a connection closed at
// once because every pending connection it could have evicted was still
// in its grace (a quarter of the handshake bound, at most maxGrace).
const ReasonBusy = "busy"

// maxGrace bounds how long Serve keeps a pending connection safe from
// eviction.
const maxGrace = 500 * time.Millisecond

var errBusy = &AuthError{ReasonBusy, errors.New("control channel: refused: too many connections in their handshake, each still in its grace")}

// errEvicted is a connection evicted from Serve's gate in its handshake.
var errEvicted = &AuthError{ReasonEvicted, errors.New("control channel: dropped in its handshake to make room for a newer connection")}

// evicted reports whether c was evicted from Serve's gate. Send and Recv
// ask after setting their deadline, which an eviction's would replace.
func (c *Conn) evicted() bool { return c.ticket != nil && c.ticket.Evicted() }

// timeoutError is a message not received in time; it matches
// os.ErrDeadlineExceeded.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }
func (e *timeoutError) Unwrap() error { return os.ErrDeadlineExceeded }

// closedError is the other side's closing of the connection (an end of
// file, a reset); it matches io.EOF.
type closedError struct{ msg string }

func (e *closedError) Error() string { return e.msg }
func (e *closedError) Unwrap() error { return io.EOF }

// malformedError is a line that is not a message: too long, or not JSON.
type malformedError struct{ msg string }

func (e *malformedError) Error() string { return e.msg }

// unexpectedError is a message of another type than the one due.
type unexpectedError struct{ msg, got string }

func (e *unexpectedError) Error() string { return e.msg }

// NewConn wraps conn, the connection to peer ("producer" or "consumer",
// which errors name), so that each Send and Recv waits at most timeout.
// Cancelling ctx ends a blocked Send or Recv at once. The Conn owns conn:
// Close closes it.
func NewConn(ctx context.Context, conn net.Conn, timeout time.Duration, peer string) *Conn {
	c := &Conn{conn: conn, r: bufio.NewReaderSize(conn, MaxLine+macLen), timeout: timeout, peer: peer}
	c.stop = context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	return c
}

// Close closes the connection. Idempotent.
func (c *Conn) Close() error {
	c.stop()
	if err := c.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// Send writes m as one line.
func (c *Conn) Send(m Msg) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	if c.skey != nil {
		mac := lineMAC(c.skey, c.sent, b[:len(b)-1])
		c.sent++
		b = append(append(hex.AppendEncode(make([]byte, 0, macLen+len(b)), mac), ' '), b...)
	}
	c.conn.SetWriteDeadline(time.Now().Add(c.timeout))
	if c.evicted() {
		return errEvicted
	}
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("control channel: sending to the %s: %w", c.peer, err)
	}
	return nil
}

// Recv reads the next message, which must be of type want. An error
// message from the other side is returned as a *PeerError; any other type
// is an error.
func (c *Conn) Recv(want string) (Msg, error) {
	c.conn.SetReadDeadline(time.Now().Add(c.timeout))
	if c.evicted() {
		return Msg{}, errEvicted
	}
	line, err := c.r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return Msg{}, &malformedError{fmt.Sprintf("control channel: a message from the %s longer than %d bytes", c.peer, MaxLine)}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return Msg{}, &closedError{fmt.Sprintf("control channel: the %s closed the connection (did it exit?)", c.peer)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return Msg{}, &timeoutError{fmt.Sprintf("control channel: no %q message from the %s within --timeout %v", want, c.peer, c.timeout)}
	case err != nil:
		return Msg{}, fmt.Errorf("control channel: receiving from the %s: %w", c.peer, err)
	}
	limit := MaxLine
	if c.rkey != nil {
		limit += macLen
	}
	if len(line) > limit {
		return Msg{}, &malformedError{fmt.Sprintf("control channel: a message from the %s longer than %d bytes", c.peer, MaxLine)}
	}
	if c.rkey != nil {
		body := bytes.TrimSuffix(line, []byte("\n"))
		// The MAC as its canonical lower-case hex, compared in constant
		// time: another spelling of the same bytes is not the line sent.
		ok := len(body) >= macLen && body[macLen-1] == ' ' &&
			auth.Equal(body[:macLen-1], hex.AppendEncode(make([]byte, 0, macLen-1), lineMAC(c.rkey, c.received, body[macLen:])))
		if !ok {
			return Msg{}, fmt.Errorf("control channel: a message from the %s failed authentication (forged, replayed or reordered)", c.peer)
		}
		c.received++
		line = body[macLen:]
	}
	m, err := decode(line)
	if err != nil {
		return Msg{}, &malformedError{fmt.Sprintf("control channel: a malformed message from the %s: %v", c.peer, err)}
	}
	switch m.Type {
	case want:
		return m, nil
	case TypeError:
		return Msg{}, &PeerError{Peer: c.peer, Msg: m.Error}
	}
	if want == TypeChallenge && m.Type == TypeHello {
		return Msg{}, &unexpectedError{got: m.Type, msg: fmt.Sprintf("control channel: the %s sent a %q message where a %q was due", c.peer, m.Type, want)}
	}
	if want == TypeHello && m.Type == TypeChallenge {
		return Msg{}, fmt.Errorf("control channel: the %s requires a shared secret, and this side has none: give both the same secret (secret_file, %sSECRET)", c.peer, "XFER_")
	}
	return Msg{}, &unexpectedError{got: m.Type, msg: fmt.Sprintf("control channel: the %s sent a %q message where a %q was due", c.peer, m.Type, want)}
}

// Fail tells the other side about err (best effort), unless err is the
// other side's own (a *PeerError), and returns err.
func (c *Conn) Fail(err error) error {
	var pe *PeerError
	if !errors.As(err, &pe) {
		_ = c.Send(Msg{Type: TypeError, Error: err.Error()})
	}
	return err
}

// PeerError is the other side's reason for giving up: the error message
// it sent.
type PeerError struct {
	Peer string // "producer" or "consumer"
	Msg  string
}

func (e *PeerError) Error() string { return fmt.Sprintf("the %s failed: %s", e.Peer, e.Msg) }
