package main

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/bench"
)

func plotResults() []bench.Result {
	var rs []bench.Result
	for i, size := range []int64{64, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
		rs = append(rs, bench.Result{
			Transport: "tcp", Op: "write", Size: size, Ops: 1000, Elapsed: time.Duration(i+1) * time.Millisecond,
			P50: time.Duration(size/10+1000) * time.Nanosecond, P99: time.Duration(size/5+3000) * time.Nanosecond,
		})
	}
	return rs
}

func TestPlotPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.png")
	if err := writePlot(path, plotResults()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 100 {
		t.Errorf("image is %v", r)
	}
}

func TestPlotSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.SVG")
	// With one size only the axis ranges must still be valid.
	if err := writePlot(path, plotResults()[3:4]); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var root string
	for {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("not an SVG document (root %q): %v", root, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			root = se.Name.Local
			break
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	for {
		if _, err := dec.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("bad XML: %v", err)
			}
			break
		}
	}
	if !strings.Contains(string(b), "1MiB") {
		t.Error("the size axis has no 1MiB label")
	}
}

func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"bench.pdf", "bench", "bench.png.txt"} {
		err := writePlot(filepath.Join(dir, name), plotResults())
		if err == nil || !strings.Contains(err.Error(), ".png or .svg") {
			t.Errorf("%s: error %v, want one about the extension", name, err)
		}
	}
	if err := writePlot(filepath.Join(dir, "x.png"), []bench.Result{{Size: 64}}); err == nil {
		t.Error("no error plotting sizes without operations")
	}
}
