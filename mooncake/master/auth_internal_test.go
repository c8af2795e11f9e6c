package master

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/xferio/xfer/internal/auth"
)

// TestCallProofReplay captures a call's proof and sends it again: the
// second is refused, as is one out of the time window or for another
// method.
func TestCallProofReplay(t *testing.T) {
	const secret = "a secret of more than sixteen bytes"
	var md metadata.MD
	capture := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		md, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	UnaryClientInterceptor(secret)(context.Background(), "/m/A", nil, nil, nil, capture)
	a := &serverAuth{key: auth.NewKey([]byte(secret)), seen: auth.Senders{Span: callWindow, Max: maxProofClients}}
	now := time.Now()
	if _, err := a.verify(md, "/m/B", now); err == nil {
		t.Fatal("a proof for another method was accepted")
	}
	if _, err := a.verify(md, "/m/A", now.Add(3*time.Minute)); err == nil {
		t.Fatal("a proof out of the time window was accepted")
	}
	if _, err := a.verify(md, "/m/A", now); err != nil {
		t.Fatalf("the proof: %v", err)
	}
	if _, err := a.verify(md, "/m/A", now); err == nil {
		t.Fatal("a replayed proof was accepted")
	}
	if _, err := a.verify(metadata.Pairs(mdProof, "!!"), "/m/A", now); err == nil {
		t.Fatal("a malformed proof was accepted")
	}
}
