package master

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// DefaultOpTimeout bounds each call of a Client whose context has no
// earlier deadline.
const DefaultOpTimeout = 10 * time.Second

// NewGRPCServer returns a gRPC server that serves s, refusing calls that
// do not prove secret when it is set (UnaryServerInterceptor), and, once
// s is a candidate (StartHA), calls while it is not the leader. opts are
// added to its options.
func (s *Service) NewGRPCServer(secret string, opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(UnaryServerInterceptor(secret, s), s.gateInterceptor)}, opts...)...)
	masterpb.RegisterMasterServer(g, s)
	return g
}

// DialOptions configures Dial. The zero value is a client with the
// default timeout and no secret.
type DialOptions struct {
	// OpTimeout bounds each call whose context has no earlier deadline,
	// and the wait for the first connection. Default: DefaultOpTimeout.
	OpTimeout time.Duration
	// Secret is the shared secret the master requires (SecretFrom).
	// Default: none.
	Secret string
	// GRPC are more options for the connection.
	GRPC []grpc.DialOption
}

// Client is a master's client: masterpb's generated client, whose calls
// are bounded by OpTimeout and prove the secret.
type Client struct {
	masterpb.MasterClient
	cc *grpc.ClientConn
}

// Dial connects to the master at addr (host:port) and waits, within ctx
// and OpTimeout, until the connection is ready.
func Dial(ctx context.Context, addr string, o DialOptions) (*Client, error) {
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	bound := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > o.OpTimeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.OpTimeout)
			defer cancel()
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(bound, UnaryClientInterceptor(o.Secret)),
	}, o.GRPC...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("mooncake master %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.OpTimeout)
	defer cancel()
	cc.Connect()
	for st := cc.GetState(); st != connectivity.Ready; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			cc.Close()
			return nil, fmt.Errorf("mooncake master %s: not reachable (last state %s): %w", addr, st, ctx.Err())
		}
	}
	return &Client{MasterClient: masterpb.NewMasterClient(cc), cc: cc}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
