package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/xferio/xfer/mooncake"
)

// TestMetadataServerCommand runs `xfer mooncake metadata-server` and
// publishes and resolves a segment through it, as an engine does.
func TestMetadataServerCommand(t *testing.T) {
	t.Setenv("MC_METADATA_HTTP_TOKEN", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"mooncake", "metadata-server", "--host", "127.0.0.1", "--port", "0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), metadataBanner)
	if !ok {
		t.Fatalf("first line %q", line)
	}
	go io.Copy(io.Discard, pr)
	s, err := mooncake.OpenStore(ctx, "http://"+addr+"/metadata", mooncake.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := mooncake.RPCMeta{Host: "127.0.0.1", Port: 4242}
	if err := mooncake.PublishRPCMeta(ctx, s, "decode-1", m); err != nil {
		t.Fatal(err)
	}
	if got, err := mooncake.ResolveRPCMeta(ctx, s, "decode-1"); err != nil || got != m {
		t.Fatalf("resolve: %+v, %v", got, err)
	}
	if _, err := mooncake.ResolveRPCMeta(ctx, s, "decode-2"); !errors.Is(err, mooncake.ErrNotFound) {
		t.Fatalf("an unknown segment: %v", err)
	}
	s.Close()
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("metadata-server exited %d when stopped", code)
	}
}

func TestMetadataServerFlags(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, port, _ := net.SplitHostPort(busy.Addr().String())
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--port", "70000"}, "", "--port 70000"},
		{[]string{"--port", "0", "--host", "127.0.0.1"}, "x", "MC_METADATA_MAX_KEYS"},
		// A port in use: an error, and no banner.
		{[]string{"--port", port, "--host", "127.0.0.1"}, "", "address already in use"},
	} {
		t.Setenv("MC_METADATA_MAX_KEYS", tc.env)
		var e strings.Builder
		code := run(context.Background(), append([]string{"mooncake", "metadata-server"}, tc.args...), io.Discard, &e)
		if code == 0 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error naming %q", tc.args, code, e.String(), tc.want)
		}
	}
}
