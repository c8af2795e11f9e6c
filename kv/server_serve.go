package kv

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Serve serves the KV service on lis until ctx is done, then stops
// gracefully (requests in progress finish, for up to five seconds) and
// closes the server.
//
// When the server's engine has a node ID in a directory (ServerOptions.Engine's
// Directory and NodeID), Serve lists lis's address in the node's entry as
// the "kv" service (Advertise) first, so that a Cluster finds the server.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	if err := s.Advertise(ctx, lis.Addr().String()); err != nil {
		s.Close()
		return err
	}
	opts = append([]grpc.ServerOption{grpc.Creds(s.Credentials()), grpc.InTapHandle(s.auth.tap)}, opts...)
	g := grpc.NewServer(append(s.grpcLimits(), opts...)...)
	s.Register(g)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			g.Stop()
		}
		<-errc
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// grpcLimits are the gRPC server options by which Serve closes the
// connections of idle and vanished clients; options passed to Serve come
// after them, and win.
func (s *Server) grpcLimits() []grpc.ServerOption {
	idle := s.opts.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle, Time: keepaliveTime, Timeout: keepaliveTimeout}),
		// Clients may ping (gRPC's keepalive) as often as every 10 s, even
		// without an RPC in flight, without being sent away for it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(min(idle, handshakeTimeout)),
	}
}

// Advertise lists addr, where the server's gRPC service is reachable, in
// its engine's directory entry as the "kv" service (ServiceName); a
// wildcard host becomes the engine's advertised host. Serve calls it; a
// program that registers the service with a grpc.Server of its own calls
// it itself. Without a directory and node ID it does nothing.
func (s *Server) Advertise(ctx context.Context, addr string) error {
	if s.e.NodeID() == "" {
		return nil
	}
	if err := s.e.SetService(ctx, ServiceName, addr); err != nil {
		return fmt.Errorf("kv: advertise %s: %w", addr, err)
	}
	// In a cluster now: answer only the keys it owns, while it knows it
	// does (fence.go).
	s.fenceOnce.Do(func() {
		f := newFence(s.log, s.st, s.e.Directory(), s.e.NodeID(), s.e.Config().DirectoryTTL)
		s.fence.Store(f)
		s.wg.Go(func() { f.run(s.ctx) })
	})
	return nil
}
