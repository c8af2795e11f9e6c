package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestServeMemoryPopulated: xfer serve's region holds a pattern, not the
// zeros of memory never written, so a READ from it copies real memory (a
// benchmark that READs the kernel's shared zero page measures a cache).
func TestServeMemoryPopulated(t *testing.T) {
	addr := startServe(t, "--transport", "tcp", "--memory-mb", "16")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := e.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	remote, ok := p.Region(defaultRegionName)
	if !ok {
		t.Fatal("xfer serve exports no default region")
	}
	buf, err := e.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []uint64{0, uint64(remote.Len) / 2, uint64(remote.Len) - 4096} {
		dst := buf.Bytes()[:4096]
		if err := p.Read(ctx, dst, remote.At(off)); err != nil {
			t.Fatal(err)
		}
		if bytes.Count(dst, []byte{0}) == len(dst) {
			t.Fatalf("the page at %d of xfer serve's %d-byte region is all zeros: never written", off, remote.Len)
		}
	}
}
