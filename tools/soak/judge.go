package main

import (
	"fmt"
	"slices"
)

// A Sample is one reading of the server's resources, taken while it is
// idle: after a round's bench and churn have both finished and its
// counts have settled.
type Sample struct {
	Round      int
	RSS        float64 // process_resident_memory_bytes
	Goroutines float64 // go_goroutines
	FDs        float64 // process_open_fds
}

// A Bound is how much a resource may grow from the first third of the
// samples after warm-up to the last third: the last third's largest value
// must stay within the first third's largest times (1 + Rel), plus Abs.
type Bound struct {
	Rel float64
	Abs float64
}

// The bounds a soak applies unless told otherwise. RSS moves with the Go
// heap's pacing and the kernel's accounting of shared pages, so it gets a
// margin; goroutines and descriptors of an idle server should come back
// to the same count after every round, within a few of what in-flight
// teardown leaves.
var (
	defaultRSSBound        = Bound{Rel: 0.10, Abs: 16 << 20}
	defaultGoroutinesBound = Bound{Rel: 0.10, Abs: 8}
	defaultFDsBound        = Bound{Rel: 0.10, Abs: 8}
)

// minJudged is the fewest samples after warm-up that a verdict needs:
// three in each third.
const minJudged = 9

// A Verdict is the judgement of one resource.
type Verdict struct {
	Name        string
	Unit        float64 // values are divided by it when printed
	First, Last float64 // the first and the last sample, warm-up included
	MaxFirst    float64 // the largest in the first third after warm-up
	MaxLast     float64 // the largest in the last third
	Limit       float64 // what MaxLast may reach
	OK          bool
}

func (v Verdict) String() string {
	word := "flat"
	if !v.OK {
		word = "GROWS"
	}
	f := func(x float64) string {
		if v.Unit != 1 {
			return fmt.Sprintf("%.1f", x/v.Unit)
		}
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%-15s %10s %10s %12s %12s %10s  %s", v.Name, f(v.First), f(v.Last), f(v.MaxFirst), f(v.MaxLast), f(v.Limit), word)
}

// verdictHeader heads the lines of Verdict.String.
const verdictHeader = "resource             first       last   max 1st 1/3  max last 1/3      limit"

// judge compares the last third of vals[warm:] against its first third.
func judge(name string, unit float64, vals []float64, warm int, b Bound) (Verdict, error) {
	v := Verdict{Name: name, Unit: unit}
	if len(vals) > 0 {
		v.First, v.Last = vals[0], vals[len(vals)-1]
	}
	if warm < 0 || warm > len(vals) {
		warm = len(vals)
	}
	judged := vals[warm:]
	if len(judged) < minJudged {
		return v, fmt.Errorf("%s: %d samples after a warm-up of %d, a verdict needs %d: run longer", name, len(judged), warm, minJudged)
	}
	third := len(judged) / 3
	v.MaxFirst = slices.Max(judged[:third])
	v.MaxLast = slices.Max(judged[len(judged)-third:])
	v.Limit = v.MaxFirst*(1+b.Rel) + b.Abs
	v.OK = v.MaxLast <= v.Limit
	return v, nil
}

// warmUp is how many of n samples a soak leaves out as warm-up: a fifth,
// and at least the first two rounds.
func warmUp(n int) int {
	return max(2, n/5)
}
