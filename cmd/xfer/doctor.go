package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/probe"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host for RDMA and print the exact fix for each problem",
		Long: "doctor runs the production checklist of an RDMA host and says, for each check that fails,\n" +
			"the command that fixes it:\n" +
			"  - the build has verbs (cgo) and libibverbs loads;\n" +
			"  - kernel modules: ib_core, ib_uverbs, rdma_cm/rdma_ucm and a device driver\n" +
			"    (rdma_rxe, siw, mlx5_ib, irdma, bnxt_re, ...) are loaded;\n" +
			"  - devices, and their ports ACTIVE;\n" +
			"  - the GID table, naming the RoCE v2 entry to use (iWARP: the netdev's address);\n" +
			"  - the active MTU against the netdev's;\n" +
			"  - /dev/infiniband/uverbs* and /dev/infiniband/rdma_cm can be opened read-write;\n" +
			"  - the memlock limit covers the pool (memory_mb), and huge pages;\n" +
			"  - where a GPU is present, nvidia-peermem or DMA-BUF (else: skipped, no GPU), and that the\n" +
			"    CUDA driver loads: each GPU's memory, DMA-BUF support and BAR1 size (GPU memory, --memory cuda:N);\n" +
			"  - and that tcp and shm work, which they do without RDMA.\n" +
			"The config in use (--config, XFER_ variables, flags) is checked too: its device, port and\n" +
			"GID index must exist. It exits 1 when a check fails (warnings do not count).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			r := probe.Checkup(checkConfig(cfg))
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				printReport(g.stdout, r)
			}
			if r.Failed > 0 {
				return &exitError{fmt.Sprintf("%d check(s) failed", r.Failed)} // the summary said so
			}
			return nil
		},
	}
	cmd.Flags().Int("memory-mb", xfer.DefaultMemoryMB, "the pool size to check the memlock limit against, in `MiB`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON: {checks: [{check, status, message, fix}], failed, warned}")
	return cmd
}

// checkConfig is what doctor checks the host against: the pool and the
// rdma settings of cfg.
func checkConfig(cfg xfer.Config) probe.CheckConfig {
	memMB := cfg.MemoryMB
	if memMB == 0 {
		memMB = xfer.DefaultMemoryMB
	}
	gid, gidSet := cfg.RDMA.GIDIndex.Index()
	return probe.CheckConfig{
		MemoryMB:     memMB,
		HugeExplicit: cfg.HugePages == mem.HugeExplicit,
		Device:       cfg.RDMA.Device,
		Port:         cfg.RDMA.Port,
		GIDIndex:     gid,
		GIDIndexSet:  gidSet,
		MTU:          cfg.RDMA.MTU,
		MaxSGE:       cfg.RDMA.MaxSGE,
		MaxSendWR:    cfg.RDMA.MaxSendWR,
		MaxRecvWR:    cfg.RDMA.MaxRecvWR,
		UseCM:        cfg.RDMA.UseCM,
		Congestion:   cfg.TCP.Congestion,
	}
}

var statusTags = map[string]string{probe.StatusOK: "[ OK ]", probe.StatusWarn: "[WARN]", probe.StatusFail: "[FAIL]", probe.StatusSkip: "[SKIP]"}

// printReport writes the report as text: a line per check, its fix below
// it, and a summary.
func printReport(w io.Writer, r *probe.Report) {
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s %s\n", statusTags[c.Status], c.Message)
		if c.Fix != "" {
			fmt.Fprintf(w, "       fix: %s\n", strings.ReplaceAll(c.Fix, "\n", "\n            "))
		}
	}
	if r.Failed == 0 {
		fmt.Fprintln(w, "\nAll checks passed: the rdma transport can be used.")
	} else {
		fmt.Fprintf(w, "\n%d check(s) failed. tcp and shm work without RDMA; transport: auto uses them.\n", r.Failed)
	}
}
