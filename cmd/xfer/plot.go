package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/bytesize"
)

// plotFormat returns "png" or "svg" from path's extension.
func plotFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("--plot %q: the file name must end in .png or .svg", path)
	}
}

// writePlot draws two panels into path: bandwidth against size above, p50
// and p99 latency against size below, both with a log2 size axis.
func writePlot(path string, results []bench.Result) error {
	format, err := plotFormat(path)
	if err != nil {
		return err
	}
	// A size without operations has no latency for the log axis to show.
	results = slices.DeleteFunc(slices.Clone(results), func(r bench.Result) bool { return r.Ops == 0 })
	if len(results) == 0 {
		return fmt.Errorf("plot %s: no operations to plot", path)
	}
	title := fmt.Sprintf("xfer bench: %s over %s", results[0].Op, results[0].Transport)

	bw := newSizePlot(results)
	bw.Title.Text = title
	bw.Y.Label.Text = "bandwidth (GB/s)"
	bw.Y.Min = 0
	if err := addLine(bw, 0, "", results, func(r bench.Result) float64 { return r.BytesPerSec() / 1e9 }); err != nil {
		return err
	}

	lat := newSizePlot(results)
	lat.Y.Label.Text = "latency (µs)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	if err := addLine(lat, 1, "p50", results, func(r bench.Result) float64 { return bench.Micros(r.P50) }); err != nil {
		return err
	}
	if err := addLine(lat, 2, "p99", results, func(r bench.Result) float64 { return bench.Micros(r.P99) }); err != nil {
		return err
	}
	lat.Legend.Top = true
	lat.Legend.Left = true

	const w, h = 16 * vg.Centimeter, 18 * vg.Centimeter
	var c vg.CanvasWriterTo
	if format == "png" {
		c = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	} else {
		c = vgsvg.New(w, h)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadY: vg.Millimeter * 6}
	panels := [][]*plot.Plot{{bw}, {lat}}
	canvases := plot.Align(panels, tiles, draw.New(c))
	for i, row := range panels {
		row[0].Draw(canvases[i][0])
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// newSizePlot returns a plot whose x axis is the message size on a log2
// scale: a labelled tick at each measured size and a minor one at every
// power of two between them.
func newSizePlot(results []bench.Result) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = "message size"
	p.X.Scale = plot.LogScale{}
	lo, hi := results[0].Size, results[0].Size
	measured := make(map[int64]bool)
	for _, r := range results {
		lo, hi = min(lo, r.Size), max(hi, r.Size)
		measured[r.Size] = true
	}
	// Half a power of two of margin on each side; this also keeps a
	// single size from making an empty range.
	p.X.Min, p.X.Max = float64(lo)/math.Sqrt2, float64(hi)*math.Sqrt2
	var ticks []plot.Tick
	for s := int64(1); s <= hi; s <<= 1 {
		if s >= lo && !measured[s] {
			ticks = append(ticks, plot.Tick{Value: float64(s)})
		}
	}
	for s := range measured {
		ticks = append(ticks, plot.Tick{Value: float64(s), Label: bytesize.Format(s)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	return p
}

// addLine adds a line with points of y(r) against r.Size, in palette
// colour i, with a legend entry unless name is empty.
func addLine(p *plot.Plot, i int, name string, results []bench.Result, y func(bench.Result) float64) error {
	xys := make(plotter.XYs, len(results))
	for j, r := range results {
		xys[j] = plotter.XY{X: float64(r.Size), Y: y(r)}
	}
	slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = plotutil.Color(i)
	s.Color = plotutil.Color(i)
	s.Shape = draw.CircleGlyph{}
	p.Add(l, s)
	if name != "" {
		p.Legend.Add(name, l, s)
	}
	return nil
}
