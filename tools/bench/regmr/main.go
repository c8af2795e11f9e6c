// Command regmr measures what registering memory with an RDMA device costs:
// ibv_reg_mr plus ibv_dereg_mr of 1, 16, 64 and 256 MiB regions, in µs per
// MiB. It is run by tools/bench/verbs.sh inside the rdma-vm (rxe0).
//
// For each size it maps fresh anonymous memory and times the first
// registration ("cold": the kernel faults in and zeroes every page while it
// pins them), then registers and deregisters the same, now populated,
// mapping N times ("warm": pinning and the device's page table only). To
// tell the page faults apart from the pinning, it also times writing one
// byte per page of another fresh mapping ("touch").
//
// Output: one JSON object per size on stdout.
//
// Usage: regmr [-dev rxe0] [-sizes 1,16,64,256] [-mib 512]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
)

type result struct {
	Device        string  `json:"device"`
	SizeMiB       int     `json:"size_mib"`
	Iters         int     `json:"iters"`
	TouchUsPerMiB float64 `json:"touch_us_per_mib"`     // faulting in a fresh mapping, one store per page
	ColdUsPerMiB  float64 `json:"cold_reg_us_per_mib"`  // first reg_mr of a fresh mapping, page faults included
	RegUsPerMiB   float64 `json:"reg_us_per_mib"`       // median warm reg_mr
	DeregUsPerMiB float64 `json:"dereg_us_per_mib"`     // median dereg_mr
	BothUsPerMiB  float64 `json:"reg_dereg_us_per_mib"` // median warm reg_mr + dereg_mr
}

func main() {
	dev := flag.String("dev", "rxe0", "RDMA device")
	sizes := flag.String("sizes", "1,16,64,256", "region sizes in MiB")
	budget := flag.Int("mib", 512, "MiB to register per size in the warm loop (at least 5 iterations)")
	flag.Parse()
	if err := run(*dev, *sizes, *budget); err != nil {
		fmt.Fprintln(os.Stderr, "regmr:", err)
		os.Exit(1)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ { // insertion sort: a few hundred values
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}

func run(dev, sizes string, budget int) error {
	if err := ibv.Load(); err != nil {
		return err
	}
	ctx, err := ibv.Open(dev)
	if err != nil {
		return err
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Close()
	const access = ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead
	us := func(d time.Duration, mib int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(mib) }
	enc := json.NewEncoder(os.Stdout)
	for _, f := range strings.Split(sizes, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || mib <= 0 {
			return fmt.Errorf("bad size %q", f)
		}
		t, err := sys.MmapAnon(mib<<20, false)
		if err != nil {
			return err
		}
		page := sys.PageSize()
		t0 := time.Now()
		for i := 0; i < len(t); i += page {
			t[i] = 1
		}
		touch := time.Since(t0)
		if err := sys.Munmap(t); err != nil {
			return err
		}
		b, err := sys.MmapAnon(mib<<20, false)
		if err != nil {
			return err
		}
		t0 = time.Now()
		mr, err := pd.RegMR(b, access)
		cold := time.Since(t0)
		if err != nil {
			sys.Munmap(b)
			return err
		}
		if err := mr.Close(); err != nil {
			return err
		}
		n := max(5, budget/mib)
		regs := make([]time.Duration, n)
		deregs := make([]time.Duration, n)
		both := make([]time.Duration, n)
		for i := range n {
			t0 := time.Now()
			mr, err := pd.RegMR(b, access)
			t1 := time.Now()
			if err != nil {
				sys.Munmap(b)
				return err
			}
			if err := mr.Close(); err != nil {
				return err
			}
			t2 := time.Now()
			regs[i], deregs[i], both[i] = t1.Sub(t0), t2.Sub(t1), t2.Sub(t0)
		}
		if err := sys.Munmap(b); err != nil {
			return err
		}
		if err := enc.Encode(result{
			Device: dev, SizeMiB: mib, Iters: n,
			TouchUsPerMiB: us(touch, mib),
			ColdUsPerMiB:  us(cold, mib),
			RegUsPerMiB:   us(median(regs), mib),
			DeregUsPerMiB: us(median(deregs), mib),
			BothUsPerMiB:  us(median(both), mib),
		}); err != nil {
			return err
		}
	}
	return nil
}
