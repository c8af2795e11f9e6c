package transferctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/xferio/xfer/internal/admit"
)

// ServeConfig configures Serve.
type ServeConfig struct {
	// Addr is where the producer listens: its --local-host and --ctrl-port.
	Addr string
	// Timeout bounds the wait for the consumer in all, and then each
	// message due from it. Required.
	Timeout time.Duration
	// HandshakeTimeout bounds each connection's handshake: with a secret
	// its authentication, without one its answer to hello. A connection
	// that has not finished it by then is dropped, and Serve waits on.
	// Default: DefaultAuthTimeout; never more than Timeout.
	HandshakeTimeout time.Duration
	// Secret is the shared secret; "" runs the channel unauthenticated.
	Secret string
	// Hello is the producer's first message. Without a secret it goes to
	// every connection, and the first to answer ready is the consumer;
	// with one, to the consumer that authenticated first.
	Hello Msg
	// MaxPending bounds the connections in their handshake at once, and
	// MaxPendingPerSource those from one address: beyond either, the
	// oldest is dropped for the new one (package internal/admit).
	// Default: 64 and 8.
	MaxPending, MaxPendingPerSource int
	// Say hears that Serve waits; Refused hears of every connection
	// dropped before it finished its handshake (its remote address, the
	// reason: no_proof, bad_proof, malformed, timeout or evicted, and
	// why). Either may be nil.
	Say     func(string)
	Refused func(remote, reason string, err error)
}

// Serve listens on cfg.Addr, the producer's, and waits up to cfg.Timeout
// for the consumer: the first connection that authenticates with the
// secret (without a secret, that answers cfg.Hello with ready). It sends
// that connection cfg.Hello and returns it with the consumer's ready.
//
// Any other connection (idle, trickling, closed early, garbage, another
// secret) is dropped when it fails its handshake or after
// cfg.HandshakeTimeout, reported to cfg.Refused, and Serve waits on; at
// most cfg.MaxPending connections are in their handshake at once, the
// oldest giving way to a new one. A consumer that refuses the run (it
// answers hello with error) ends Serve with that error, a *PeerError.
func Serve(ctx context.Context, cfg ServeConfig) (*Conn, Msg, error) {
	if cfg.Timeout <= 0 {
		return nil, Msg{}, fmt.Errorf("control channel: timeout %v: must be positive", cfg.Timeout)
	}
	hsTimeout := cfg.HandshakeTimeout
	if hsTimeout <= 0 {
		hsTimeout = DefaultAuthTimeout
	}
	hsTimeout = min(hsTimeout, cfg.Timeout)
	say, refused := cfg.Say, cfg.Refused
	if say == nil {
		say = func(string) {}
	}
	if refused == nil {
		refused = func(string, string, error) {}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, Msg{}, fmt.Errorf("control channel: listen on %s: %w", cfg.Addr, err)
	}
	defer ln.Close()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // the connections still in their handshake end at once: cancel closes them
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(cfg.Timeout))
	say(fmt.Sprintf("waiting for the consumer on %s (up to %v)", cfg.Addr, cfg.Timeout))
	// A connection is safe from eviction for a quarter of the handshake
	// bound (at most maxGrace): without a secret every connection gets
	// hello at once, and only its ready tells the consumer from a stray;
	// strays arriving faster than that round trip must not evict it in
	// between (the consumer, which saw hello, would not dial again).
	gate := admit.New(admit.Config{Max: cfg.MaxPending, PerSource: cfg.MaxPendingPerSource, Grace: min(hsTimeout/4, maxGrace)})
	var mu sync.Mutex
	var last error // the latest refusal, for the timeout's error
	dropped := 0   // the connections refused
	type seated struct {
		c     *Conn
		ready Msg
		err   error // the consumer refused the run
	}
	won := make(chan seated, 1)
	for {
		conn, err := ln.Accept()
		switch {
		case ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			select {
			case s := <-won:
				if s.err != nil {
					return nil, Msg{}, s.err
				}
				mu.Lock()
				if dropped > 0 {
					say(fmt.Sprintf("the consumer is connected; %d other connections were dropped before they completed the handshake", dropped))
				}
				mu.Unlock()
				return s.c.serve(parent, cfg, s.ready)
			default:
			}
			return nil, Msg{}, context.Cause(parent)
		case errors.Is(err, os.ErrDeadlineExceeded):
			mu.Lock()
			defer mu.Unlock()
			if last != nil {
				return nil, Msg{}, fmt.Errorf("control channel: no consumer completed its handshake on %s within --timeout %v (last refused: %w)", cfg.Addr, cfg.Timeout, last)
			}
			return nil, Msg{}, fmt.Errorf("control channel: no consumer connected to %s within --timeout %v", cfg.Addr, cfg.Timeout)
		case err != nil:
			return nil, Msg{}, fmt.Errorf("control channel: accept on %s: %w", cfg.Addr, err)
		}
		ticket, ok := gate.TryAdmit(conn)
		if !ok {
			// Every connection it could evict is in its grace: refused at
			// once (a consumer dials again).
			conn.Close()
			mu.Lock()
			last = errBusy
			dropped++
			mu.Unlock()
			refused(conn.RemoteAddr().String(), ReasonBusy, errBusy)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewConn(ctx, conn, hsTimeout, "consumer")
			c.ticket = ticket
			var ready Msg
			var err error
			if cfg.Secret != "" {
				err = c.authenticate(cfg.Secret, true)
			} else {
				ready, err = c.exchange(cfg.Hello)
			}
			// A handshake that ended stays even if it was evicted at its
			// very end: the consumer saw it end.
			if !ticket.Leave() && err != nil {
				err = errEvicted
			}
			c.ticket = nil
			var pe *PeerError
			if cfg.Secret == "" && errors.As(err, &pe) {
				c.Close()
				select {
				case won <- seated{err: err}: // the consumer refused the run
					cancel()
				default:
				}
				return
			}
			if err != nil {
				c.Close()
				if ctx.Err() != nil {
					return // Serve is over: not a refusal
				}
				mu.Lock()
				last = err
				dropped++
				mu.Unlock()
				refused(conn.RemoteAddr().String(), refusal(err), err)
				return
			}
			c.stop() // serve ties it to the caller's ctx instead
			select {
			case won <- seated{c: c, ready: ready}:
				cancel() // wakes Accept
			default:
				c.Close() // another consumer was first
			}
		}()
	}
}

// exchange is the handshake of a channel without a secret: hello, and the
// consumer's answer.
func (c *Conn) exchange(hello Msg) (Msg, error) {
	if err := c.Send(hello); err != nil {
		return Msg{}, err
	}
	return c.Recv(TypeReady)
}

// serve makes c, the consumer's connection, Serve's result: tied to ctx,
// waiting Timeout for each message, and, with a secret, past hello.
func (c *Conn) serve(ctx context.Context, cfg ServeConfig, ready Msg) (*Conn, Msg, error) {
	c.timeout = cfg.Timeout
	c.stop = context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })
	if cfg.Secret == "" {
		return c, ready, nil
	}
	ready, err := c.exchange(cfg.Hello)
	if err != nil {
		c.Close()
		return nil, Msg{}, err
	}
	return c, ready, nil
}
