package transporttest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/transport"
)

// Factory returns a new Transport: NewPair calls it once per side, as two
// engines would each have their own.
type Factory func(tb testing.TB) transport.Transport

// PairConfig is what NewPair puts into both sides' transport.Params. Zero
// means a documented default.
type PairConfig struct {
	// Conns is how many TCP connections the endpoints use (default 1);
	// the extra ones come from DialExtra and AcceptExtra.
	Conns int
	// MaxMessage is the largest message (default 64 KiB); RecvDepth how
	// many messages a side may have outstanding at the other (default 64).
	MaxMessage int
	RecvDepth  int
	// Memfd makes both hosts' regions memfd-backed.
	Memfd bool
	// PollSpin is Params.PollSpin.
	PollSpin time.Duration
	// Logger is Params.Logger; default: one that discards.
	Logger *slog.Logger
	// OnFailover, when set, is both sides' Params.OnFailover, told which
	// side calls it.
	OnFailover func(role transport.Role, from, to string, cause error)
}

func (c PairConfig) withDefaults() PairConfig {
	if c.Conns == 0 {
		c.Conns = 1
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = 64 << 10
	}
	if c.RecvDepth == 0 {
		c.RecvDepth = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Side is one end of a Pair: its transport, its host and its endpoint.
type Side struct {
	Transport transport.Transport
	Host      *Host
	Endpoint  transport.Endpoint
	Info      transport.PeerInfo // what the handshake said about this side
}

// Pair is two connected endpoints in this process: the dialer's and the
// acceptor's, each with a Host of its own.
type Pair struct {
	Dialer, Acceptor *Side
	Config           PairConfig
}

// hostID stands for this host and PID namespace: both sides of every
// pair share it, as two engines on one host do.
var hostID = func() (id [16]byte) {
	_, _ = rand.Read(id[:])
	return id
}()

// NewPair connects two endpoints of the transports newTransport makes, as
// two engines would after their handshake: a real loopback TCP connection
// carries a handshake (each side's ID, PID, host ID and LocalBlob), the
// acceptor checks Usable, and both sides call Connect concurrently with
// Params that mirror the engine's. Extra connections (Conns > 1) are
// dialed to the same listener. The endpoints, the hosts' regions and the
// transports are closed when the test ends, in that order.
func NewPair(tb testing.TB, newTransport Factory, c PairConfig) *Pair {
	tb.Helper()
	p, err := Connect(tb, newTransport(tb), newTransport(tb), c)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Connect is NewPair with the transports given, and the error returned.
// It closes the transports when the test ends, also on error.
func Connect(tb testing.TB, dt, at transport.Transport, c PairConfig) (*Pair, error) {
	tb.Helper()
	c = c.withDefaults()
	p := &Pair{Config: c,
		Dialer:   &Side{Transport: dt, Host: NewHost(tb, c.Memfd)},
		Acceptor: &Side{Transport: at, Host: NewHost(tb, c.Memfd)},
	}
	// Cleanups run last-registered first: the endpoints close, then the
	// hosts unmap their regions (telling the transports to forget them),
	// then the transports close.
	for _, t := range []transport.Transport{dt, at} {
		if cl, ok := t.(io.Closer); ok {
			tb.Cleanup(func() { cl.Close() })
		}
	}
	for _, s := range []*Side{p.Dialer, p.Acceptor} {
		h := s.Host
		tb.Cleanup(h.closeAll)
	}
	tb.Cleanup(func() {
		for _, s := range []*Side{p.Dialer, p.Acceptor} {
			if s.Endpoint != nil {
				s.Endpoint.Close()
			}
		}
	})
	for _, s := range []*Side{p.Dialer, p.Acceptor} {
		if err := s.Transport.Available(); err != nil {
			return nil, fmt.Errorf("transport %s is not available: %w", s.Transport.Name(), err)
		}
		s.Info = transport.PeerInfo{PID: os.Getpid(), HostID: hostID, Blob: s.Transport.LocalBlob()}
		_, _ = rand.Read(s.Info.ID[:])
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	p.Acceptor.Info.Addr = ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Close must not wait for a connection that never comes.
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- nc
	}()
	var d net.Dialer
	dc, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("dial the handshake connection: %w", err)
	}
	var ac net.Conn
	select {
	case ac = <-accepted:
	case err := <-acceptErr:
		dc.Close()
		return nil, fmt.Errorf("accept the handshake connection: %w", err)
	}

	// The handshake: both sides send what the engine's Hello and Welcome
	// carry for the transport, at once, and read the other's.
	type hello struct {
		info transport.PeerInfo
		err  error
	}
	exchange := func(nc net.Conn, local transport.PeerInfo, out chan<- hello) {
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		defer nc.SetDeadline(time.Time{})
		werr := make(chan error, 1)
		go func() { werr <- writeHello(nc, local) }()
		info, err := readHello(nc)
		if e := <-werr; err == nil {
			err = e
		}
		out <- hello{info, err}
	}
	dh, ah := make(chan hello, 1), make(chan hello, 1)
	go exchange(dc, p.Dialer.Info, dh)
	go exchange(ac, p.Acceptor.Info, ah)
	dr, ar := <-dh, <-ah
	if err := errors.Join(dr.err, ar.err); err != nil {
		dc.Close()
		ac.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	remoteOfDialer := dr.info // the acceptor, as the dialer heard it
	remoteOfDialer.Addr = ln.Addr().String()
	remoteOfAcceptor := ar.info
	if err := at.Usable(p.Acceptor.Info, remoteOfAcceptor); err != nil {
		dc.Close()
		ac.Close()
		return nil, fmt.Errorf("acceptor: transport %s not usable: %w", at.Name(), err)
	}

	params := func(role transport.Role, nc net.Conn, s *Side, remote transport.PeerInfo) transport.Params {
		pp := transport.Params{Role: role, Conn: nc, Local: s.Info, Remote: remote, Host: s.Host,
			Conns: c.Conns, MaxMessage: c.MaxMessage, RecvDepth: c.RecvDepth, PollSpin: c.PollSpin, Logger: c.Logger}
		if f := c.OnFailover; f != nil {
			pp.OnFailover = func(from, to string, cause error) { f(role, from, to, cause) }
		}
		if role == transport.Dialer {
			pp.DialExtra = func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", ln.Addr().String())
			}
		} else {
			pp.AcceptExtra = func(ctx context.Context) (net.Conn, error) {
				stop := context.AfterFunc(ctx, func() { ln.Close() })
				defer stop()
				nc, err := ln.Accept()
				if err != nil && ctx.Err() != nil {
					err = fmt.Errorf("waiting for the peer's extra connection: %w", ctx.Err())
				}
				return nc, err
			}
		}
		return pp
	}
	type result struct {
		ep  transport.Endpoint
		err error
	}
	var wg sync.WaitGroup
	var dres, ares result
	wg.Add(2)
	go func() {
		defer wg.Done()
		dres.ep, dres.err = dt.Connect(ctx, params(transport.Dialer, dc, p.Dialer, remoteOfDialer))
	}()
	go func() {
		defer wg.Done()
		ares.ep, ares.err = at.Connect(ctx, params(transport.Acceptor, ac, p.Acceptor, remoteOfAcceptor))
	}()
	wg.Wait()
	p.Dialer.Endpoint, p.Acceptor.Endpoint = dres.ep, ares.ep
	if dres.err != nil || ares.err != nil {
		if dres.err != nil {
			dres.err = fmt.Errorf("dialer: connect %s: %w", dt.Name(), dres.err)
		}
		if ares.err != nil {
			ares.err = fmt.Errorf("acceptor: connect %s: %w", at.Name(), ares.err)
		}
		return nil, errors.Join(dres.err, ares.err)
	}
	p.Dialer.Host.Attach(dres.ep, dt)
	p.Acceptor.Host.Attach(ares.ep, at)
	return p, nil
}

// The handshake message: ID, host ID, PID, blob length, blob.
func writeHello(w io.Writer, info transport.PeerInfo) error {
	b := make([]byte, 0, 40+len(info.Blob))
	b = append(b, info.ID[:]...)
	b = append(b, info.HostID[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(info.PID))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(info.Blob)))
	b = append(b, info.Blob...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (transport.PeerInfo, error) {
	var hdr [40]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return transport.PeerInfo{}, err
	}
	var info transport.PeerInfo
	copy(info.ID[:], hdr[:16])
	copy(info.HostID[:], hdr[16:32])
	info.PID = int(binary.LittleEndian.Uint32(hdr[32:]))
	n := binary.LittleEndian.Uint32(hdr[36:])
	if n > 1<<16 {
		return transport.PeerInfo{}, fmt.Errorf("handshake blob of %d bytes", n)
	}
	if n > 0 {
		info.Blob = make([]byte, n)
		if _, err := io.ReadFull(r, info.Blob); err != nil {
			return transport.PeerInfo{}, err
		}
	}
	return info, nil
}

// Peer returns the other side of s.
func (p *Pair) Peer(s *Side) *Side {
	if s == p.Dialer {
		return p.Acceptor
	}
	return p.Dialer
}
