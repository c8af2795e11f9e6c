package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/directory"
)

// TestCoordinatorCommand runs `xfer coordinator` and uses it as a directory.
func TestCoordinatorCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"coordinator", "--listen", "127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), coordinatorBanner)
	if !ok {
		t.Fatalf("first line %q", line)
	}
	go io.Copy(io.Discard, pr)
	d, err := directory.Open(ctx, "http://"+addr, directory.Options{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e := directory.Entry{NodeID: "n1", Addrs: []string{"10.0.0.1:7471"}, Transports: []string{"tcp"}}
	if err := d.Register(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, err := d.Lookup(ctx, "n1")
	if err != nil || got.Addrs[0] != "10.0.0.1:7471" {
		t.Fatalf("lookup: %+v, %v", got, err)
	}
	if _, err := d.Lookup(ctx, "n2"); !errors.Is(err, directory.ErrNotFound) {
		t.Fatalf("lookup of an unknown node: %v", err)
	}
	d.Close()
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("coordinator exited %d after SIGINT", code)
	}
}

func TestCoordinatorFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"coordinator"}, "--listen"},
		{[]string{"coordinator", "--listen", ":0", "--ttl", "1h"}, "--ttl"},
		{[]string{"coordinator", "--listen", "nope:99999"}, "coordinator:"},
	} {
		var errb strings.Builder
		if code := run(context.Background(), tc.args, io.Discard, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error mentioning %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
