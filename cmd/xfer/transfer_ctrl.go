package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/xferio/xfer/connector"
)

// The control channel of xfer transfer, the counterpart of the ZMQ control
// socket of the Mooncake cross-node script: one TCP connection from the
// consumer to the producer's --ctrl-port, carrying JSON objects, one per
// line. The conversation:
//
//	producer: {"type":"hello", transfers, bytes, dtype, mode, benchmark}
//	consumer: {"type":"ready", pull} (or {"type":"error"} when the sides disagree)
//	then per transfer:
//	producer: {"type":"put", seq, meta, md5 (absent under --benchmark), put_seconds}
//	consumer: {"type":"got", seq, md5_ok, seconds, transport}
//
// Either side sends {"type":"error","error":...} before it gives up. It is
// a handful of small JSON lines, once per transfer: encoding/json over
// net.Conn covers it, and a messaging library (ZMQ, gRPC) would add a
// dependency and a second protocol for nothing. The connector's own control
// messages stay on the engine; this channel only orchestrates the tool.

// maxCtrlLine bounds one control message.
const maxCtrlLine = 64 << 10

// ctrlMsg is one control message; the fields in use depend on Type.
type ctrlMsg struct {
	Type       string          `json:"type"` // hello, ready, put, got, error
	Transfers  int             `json:"transfers,omitempty"`
	Bytes      int64           `json:"bytes,omitempty"`
	DType      string          `json:"dtype,omitempty"`
	Mode       string          `json:"mode,omitempty"`
	Pull       string          `json:"pull,omitempty"`
	Benchmark  bool            `json:"benchmark,omitempty"`
	Seq        int             `json:"seq,omitempty"`
	Meta       *connector.Meta `json:"meta,omitempty"`
	MD5        string          `json:"md5,omitempty"`
	PutSeconds float64         `json:"put_seconds,omitempty"`
	MD5OK      *bool           `json:"md5_ok,omitempty"`
	Seconds    float64         `json:"seconds,omitempty"`
	Transport  string          `json:"transport,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// ctrlConn is one end of the control channel.
type ctrlConn struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
	peer    string // "producer" or "consumer": the other side
	stop    func() bool
}

func newCtrlConn(ctx context.Context, conn net.Conn, timeout time.Duration, peer string) *ctrlConn {
	c := &ctrlConn{conn: conn, r: bufio.NewReaderSize(conn, maxCtrlLine), timeout: timeout, peer: peer}
	// Cancelling ctx (SIGINT) ends a blocked read or write at once.
	c.stop = context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	return c
}

func (c *ctrlConn) Close() error {
	c.stop()
	return c.conn.Close()
}

// send writes m as one line.
func (c *ctrlConn) send(m ctrlMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.conn.SetWriteDeadline(time.Now().Add(c.timeout))
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("control channel: sending to the %s: %w", c.peer, err)
	}
	return nil
}

// sendError tells the other side why this one gives up (best effort).
func (c *ctrlConn) sendError(err error) {
	_ = c.send(ctrlMsg{Type: "error", Error: err.Error()})
}

// recv reads the next message, which must be of type want; an "error"
// message from the other side becomes an error.
func (c *ctrlConn) recv(want string) (ctrlMsg, error) {
	c.conn.SetReadDeadline(time.Now().Add(c.timeout))
	line, err := c.r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return ctrlMsg{}, fmt.Errorf("control channel: a message from the %s longer than %d bytes", c.peer, maxCtrlLine)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return ctrlMsg{}, fmt.Errorf("control channel: the %s closed the connection (did it exit?)", c.peer)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ctrlMsg{}, fmt.Errorf("control channel: no %q message from the %s within --timeout %v", want, c.peer, c.timeout)
	case err != nil:
		return ctrlMsg{}, fmt.Errorf("control channel: receiving from the %s: %w", c.peer, err)
	}
	var m ctrlMsg
	if err := json.Unmarshal(line, &m); err != nil {
		return ctrlMsg{}, fmt.Errorf("control channel: a malformed message from the %s: %w", c.peer, err)
	}
	switch m.Type {
	case want:
		return m, nil
	case "error":
		return ctrlMsg{}, &peerError{peer: c.peer, msg: m.Error}
	}
	return ctrlMsg{}, fmt.Errorf("control channel: the %s sent a %q message where a %q was due", c.peer, m.Type, want)
}

// peerError is the other side's reason for giving up.
type peerError struct{ peer, msg string }

func (e *peerError) Error() string { return fmt.Sprintf("the %s failed: %s", e.peer, e.msg) }

// acceptCtrl listens on addr and accepts the consumer's control
// connection, waiting up to timeout.
func acceptCtrl(ctx context.Context, addr string, timeout time.Duration, say func(string)) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("control channel: listen on %s: %w", addr, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(timeout))
	say(fmt.Sprintf("waiting for the consumer on %s (up to %v)", addr, timeout))
	conn, err := ln.Accept()
	switch {
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("control channel: no consumer connected to %s within --timeout %v", addr, timeout)
	case err != nil:
		return nil, fmt.Errorf("control channel: accept on %s: %w", addr, err)
	}
	return conn, nil
}

// dialCtrl connects to the producer's control channel at addr, retrying
// until timeout: the producer may start later.
func dialCtrl(ctx context.Context, addr string, timeout time.Duration, say func(string)) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	said := false
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if !said {
			say(fmt.Sprintf("waiting for the producer on %s (up to %v)", addr, timeout))
			said = true
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("control channel: no producer answered on %s within --timeout %v (last: %w)", addr, timeout, err)
			}
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
