package verbs

import (
	"context"
	"errors"
	"fmt"
	"github.com/xferio/xfer/transport"
	"io"
	"net"
	"time"
)

// Taking a rail back: when a rail other than rail 0 failed and its
// device is usable again, the dialer's rejoinLoop takes a new extra
// connection of the engine's (the same join token as at connect; the
// engine keeps it while the endpoint lives) and asks for the rail on it
// with a rejoin request: rejoinMagic and the rail's index, two bytes. The
// acceptor's answerLoop, waiting on its extra connections, answers one
// byte: rejoinYes when its own device for the rail is usable,
// rejoinNotYet otherwise. On yes, both sides connect the rail's device
// again over that connection as at connect (new queue pairs, control
// stream, registrations), each checking that the peer's GID is still the
// one of the handshake, and the rail is up again for new operations; the
// acceptor's endpoint of the rail before, if it had not noticed the
// failure yet, is closed only then, so a request that does not end in a
// connected rail leaves the rail as it was. On no, or any failure, the
// dialer tries again with the
// probe's backoff (probeFirst, doubling up to probeMax) until the rail is
// back or the endpoint is down.

const (
	rejoinMagic  = 0xa7
	rejoinYes    = 1
	rejoinNotYet = 0
	// rejoinTimeout bounds one try: the request, its answer and the
	// connection of the rail.
	rejoinTimeout = 30 * time.Second
)

// parseRejoin checks a rejoin request against a RailEndpoint of n rails
// and returns the rail it asks for.
func parseRejoin(b [2]byte, n int) (int, error) {
	if b[0] != rejoinMagic {
		return 0, fmt.Errorf("rdma: rail rejoin: a request starts with %#x, not %#x", rejoinMagic, b[0])
	}
	if i := int(b[1]); i >= 1 && i < n {
		return i, nil
	}
	return 0, fmt.Errorf("rdma: rail rejoin: the request names rail %d; rails 1 to %d can come back", b[1], n-1)
}

// rejoinLoop is the dialer's: it tries to take each rail down back, with
// backoff, until none is down or the endpoint is.
func (re *RailEndpoint) rejoinLoop() {
	defer re.bg.Done()
	for wait := probeFirst; ; wait = min(2*wait, probeMax) {
		select {
		case <-re.ctx.Done():
			return
		case <-time.After(wait):
		}
		for i := 1; i < len(re.eps); i++ {
			if !re.down[i].Load() {
				continue
			}
			if err := re.rejoin(i); err != nil {
				re.debug("rdma rail not back yet", i, err)
			}
		}
		re.mu.Lock()
		left := false
		for i := range re.down {
			left = left || re.down[i].Load()
		}
		if !left || re.shut || re.err != nil {
			re.rejoining = false
			re.mu.Unlock()
			return
		}
		re.mu.Unlock()
	}
}

// rejoin is one try of the dialer's to take rail i back.
func (re *RailEndpoint) rejoin(i int) error {
	sub := re.subs[i]
	if err := sub.Available(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(re.ctx, rejoinTimeout)
	defer cancel()
	conn, err := re.extra(ctx)
	if err != nil {
		return fmt.Errorf("connection for its control stream: %w", err)
	}
	var ans [1]byte
	err = withDeadline(ctx, conn, func() error {
		if _, err := conn.Write([]byte{rejoinMagic, byte(i)}); err != nil {
			return err
		}
		_, err := io.ReadFull(conn, ans[:])
		return err
	})
	if err == nil && ans[0] != rejoinYes {
		err = errors.New("the peer's device for it is not usable yet")
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("rejoin request: %w", err)
	}
	return re.reconnect(ctx, i, conn)
}

// answerLoop is the acceptor's: it answers the dialer's rejoin requests,
// one at a time, until the endpoint is down.
func (re *RailEndpoint) answerLoop() {
	defer re.bg.Done()
	for {
		conn, err := re.extra(re.ctx)
		if err != nil {
			if re.ctx.Err() == nil {
				re.debug("rdma rails: no more rejoin requests taken", 0, err)
			}
			return
		}
		if err := re.answer(conn); err != nil {
			re.debug("rdma rail rejoin refused or failed", 0, err)
		}
	}
}

// answer answers one rejoin request on conn and, on yes, connects the rail.
func (re *RailEndpoint) answer(conn net.Conn) error {
	ctx, cancel := context.WithTimeout(re.ctx, rejoinTimeout)
	defer cancel()
	var req [2]byte
	if err := withDeadline(ctx, conn, func() error {
		_, err := io.ReadFull(conn, req[:])
		return err
	}); err != nil {
		conn.Close()
		return fmt.Errorf("rdma: rail rejoin request: %w", err)
	}
	i, err := parseRejoin(req, len(re.eps))
	if err != nil {
		conn.Close()
		return err
	}
	sub := re.subs[i]
	ans := byte(rejoinYes)
	aerr := sub.Available()
	if aerr != nil {
		ans = rejoinNotYet
	}
	if err := withDeadline(ctx, conn, func() error {
		_, err := conn.Write([]byte{ans})
		return err
	}); err != nil || aerr != nil {
		conn.Close()
		return errors.Join(aerr, err)
	}
	return re.reconnect(ctx, i, conn)
}

// reconnect connects rail i again over conn, its new control stream's
// connection, and installs the new endpoint.
func (re *RailEndpoint) reconnect(ctx context.Context, i int, conn net.Conn) error {
	p := re.params[i]
	p.Conn = conn
	ep, err := re.subs[i].connectOne(ctx, p)
	if err != nil {
		return err
	}
	return re.install(i, ep)
}

// install makes ep rail i's endpoint and the rail up again, unless the
// RailEndpoint is down or closing meanwhile. The rail's endpoint before,
// if it was not down (the acceptor had not noticed), is closed: its
// operations in flight are repeated, as a failed rail's.
func (re *RailEndpoint) install(i int, ep *Endpoint) error {
	re.mu.Lock()
	if re.shut || re.err != nil {
		re.mu.Unlock()
		ep.Close()
		return errors.New("the endpoint closed meanwhile")
	}
	old := re.eps[i].Swap(ep)
	if !re.down[i].Swap(false) && old != nil {
		re.bg.Add(1)
		go func() {
			defer re.bg.Done()
			old.Close()
		}()
	}
	re.mu.Unlock()
	go re.watch(i, ep)
	re.r.mu.Lock()
	log := re.r.log
	re.r.mu.Unlock()
	if log != nil {
		log.Info("rdma rail back on a live connection; operations are spread over it again", "device", re.names[i], "rail", i)
	}
	return nil
}

// withDeadline runs f with conn's deadline at ctx's end.
func withDeadline(ctx context.Context, conn net.Conn, f func() error) error {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	err := f()
	if !stop() {
		err = errors.Join(err, ctx.Err())
	}
	conn.SetDeadline(time.Time{})
	return err
}

// debug logs why a rail is not back, at debug level.
func (re *RailEndpoint) debug(msg string, i int, err error) {
	re.r.mu.Lock()
	log := re.r.log
	re.r.mu.Unlock()
	if log != nil {
		log.Debug(msg, "rail", i, "device", re.names[i], "reason", err)
	}
}

// start watches the rails: rail 0 down takes the endpoint down, another
// rail down is marked down. The acceptor answers the dialer's requests
// to take a rail back.
func (re *RailEndpoint) start() {
	for i := range re.eps {
		go re.watch(i, re.ep(i))
	}
	if re.role == transport.Acceptor && re.extra != nil {
		re.bg.Add(1)
		go re.answerLoop()
	}
}

// watch waits for rail i's endpoint e to go down.
func (re *RailEndpoint) watch(i int, e *Endpoint) {
	select {
	case <-e.Done():
	case <-re.done:
		return
	}
	if i == 0 {
		re.fail(e.Err())
		return
	}
	re.markDown(i, e, e.Err())
}

// markDown marks rail i down once, if e is still its endpoint, counts it
// and says so. It closes e, and starts the dialer's rejoinLoop.
func (re *RailEndpoint) markDown(i int, e *Endpoint, err error) {
	if i == 0 {
		return
	}
	re.mu.Lock()
	if re.ep(i) != e || !re.down[i].CompareAndSwap(false, true) {
		re.mu.Unlock()
		return
	}
	if re.shut || re.err != nil {
		re.mu.Unlock()
		return
	}
	// Not from this goroutine: it may be e's poller, or a poster.
	re.bg.Add(1)
	go func() {
		defer re.bg.Done()
		e.Close()
	}()
	if re.role == transport.Dialer && re.extra != nil && !re.rejoining {
		re.rejoining = true
		re.bg.Add(1)
		go re.rejoinLoop()
	}
	re.mu.Unlock()
	re.subs[i].railDown.Add(1)
	re.r.probe(re.subs[i])
	re.r.mu.Lock()
	log := re.r.log
	re.r.mu.Unlock()
	if log != nil {
		log.Warn("rdma rail down; its operations are repeated on the other rails until it is back", "device", re.names[i], "rail", i, "reason", err)
	}
}
