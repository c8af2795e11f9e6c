package transferctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// Conn is one end of the control channel. It is for one goroutine.
type Conn struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
	peer    string // "producer" or "consumer": the other side
	stop    func() bool
}

// NewConn wraps conn, the connection to peer ("producer" or "consumer",
// which errors name), so that each Send and Recv waits at most timeout.
// Cancelling ctx ends a blocked Send or Recv at once. The Conn owns conn:
// Close closes it.
func NewConn(ctx context.Context, conn net.Conn, timeout time.Duration, peer string) *Conn {
	c := &Conn{conn: conn, r: bufio.NewReaderSize(conn, MaxLine), timeout: timeout, peer: peer}
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
	c.conn.SetWriteDeadline(time.Now().Add(c.timeout))
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
	line, err := c.r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return Msg{}, fmt.Errorf("control channel: a message from the %s longer than %d bytes", c.peer, MaxLine)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return Msg{}, fmt.Errorf("control channel: the %s closed the connection (did it exit?)", c.peer)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return Msg{}, fmt.Errorf("control channel: no %q message from the %s within --timeout %v", want, c.peer, c.timeout)
	case err != nil:
		return Msg{}, fmt.Errorf("control channel: receiving from the %s: %w", c.peer, err)
	}
	m, err := decode(line)
	if err != nil {
		return Msg{}, fmt.Errorf("control channel: a malformed message from the %s: %w", c.peer, err)
	}
	switch m.Type {
	case want:
		return m, nil
	case TypeError:
		return Msg{}, &PeerError{Peer: c.peer, Msg: m.Error}
	}
	return Msg{}, fmt.Errorf("control channel: the %s sent a %q message where a %q was due", c.peer, m.Type, want)
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
