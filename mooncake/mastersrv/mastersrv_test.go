package mastersrv

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/mooncake"
)

// Run listens on every server it was given, tells where, serves the
// metrics and the metadata server, and stops cleanly when its context
// ends.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	at := make(chan Listening, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Options{Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", DataPort: 0,
			Metadata: &mooncake.ServerOptions{}, MetadataAddr: "127.0.0.1:0",
			Listening: func(l Listening) { at <- l }})
	}()
	var l Listening
	select {
	case l = <-at:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not listen within 30 s")
	}
	if l.GRPC == "" || l.Metrics == "" || l.Data == "" || !strings.HasPrefix(l.Metadata, "http://") || l.Candidate != "" {
		t.Errorf("listening: %+v", l)
	}
	resp, err := http.Get("http://" + l.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "mooncake") {
		t.Errorf("metrics: %s\n%.300s", resp.Status, b)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop within 30 s")
	}
}
