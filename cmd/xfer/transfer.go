package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bench"
)

func newTransferCmd(g *globals) *cobra.Command {
	var f transferFlags
	cmd := &cobra.Command{
		Use:   "transfer",
		Short: "Move tensors between a producer and a consumer with the connector, across hosts",
		Long: "transfer runs one side of a producer/consumer test of the connector (package connector):\n" +
			"start it with --role producer on one host and --role consumer on the other, in either order.\n" +
			"It is the Go counterpart of the cross-node script of vLLM-Omni's Mooncake connector.\n\n" +
			"The producer listens on --local-host:--local-port (the data plane) and on\n" +
			"--local-host:--ctrl-port (the control channel). The consumer's engine listens on its own\n" +
			"--local-host:--local-port; it dials the producer's control channel at\n" +
			"--remote-host:--ctrl-port and gets the tensors from --remote-host:--remote-port. The side\n" +
			"that starts first says so and waits for the other up to --timeout.\n\n" +
			"Each of the --num-transfers transfers: the producer fills a tensor of --tensor-size-mb MiB\n" +
			"with random data (copy: in Go memory, then Put copies it into the registered pool;\n" +
			"zerocopy: AllocTensor, filled in place, then PutBuffer), computes its MD5 (not with\n" +
			"--benchmark), and sends the consumer its metadata and MD5 over the control channel. The\n" +
			"consumer Gets it, computes the MD5, compares, releases the buffer and sends its verdict\n" +
			"back. Both print the size, the times, GB/s and the verdict; a mismatch on any transfer\n" +
			"makes both exit non-zero.\n\n" +
			"What is timed (GB/s is 10^9 bytes per second):\n" +
			"  get: the consumer's Get, from the request with the metadata in hand to the whole tensor\n" +
			"       in its pool (the producer reports the consumer's figure too);\n" +
			"  put: the producer's Put (copy: the slot's allocation, the copy into the pool, the\n" +
			"       publication) or AllocTensor + PutBuffer (zerocopy; the fill in place is not timed).\n" +
			"  e2e: put + get, in the summary.\n" +
			"Random fills, MD5s and the control messages are not timed.\n\n" +
			"On one host run the two roles with swapped ports and the same --ctrl-port:\n" +
			"  xfer transfer --role producer --local-host 127.0.0.1 --remote-host 127.0.0.1 --local-port 15500 --remote-port 15502\n" +
			"  xfer transfer --role consumer --local-host 127.0.0.1 --remote-host 127.0.0.1 --local-port 15502 --remote-port 15500\n\n" +
			"--json prints one object per transfer: role, transfer, bytes, seconds (the Get), bytes_per_sec,\n" +
			"gbps, put_seconds, put_bytes_per_sec, md5 and md5_ok (null under --benchmark); then a summary\n" +
			"with summary (true), role, transfers, bytes, seconds (the Gets'), bytes_per_sec, gbps_median,\n" +
			"gbps_min, gbps_max, put_seconds, put_bytes_per_sec, e2e_bytes_per_sec, md5_ok (all matched;\n" +
			"null under --benchmark), md5_mismatches, mode, transport (the one used), pull, dtype,\n" +
			"tensor_bytes, wall_seconds and memory_mb.\n\n" +
			"--timeout bounds the wait for the other side, each wait for its next control message, and\n" +
			"each Get. The producer serves the first connection that completes the control channel's\n" +
			"handshake (with a secret, proves it; without, answers hello) and drops any other that has\n" +
			"not within handshake_timeout (10s unless set); at most 64 connections (8 per address) wait\n" +
			"in their handshake at once, the oldest dropped for a new one, and a consumer dropped\n" +
			"before its handshake ended dials again until --timeout. With a secret (use --secret-file),\n" +
			"the control channel authenticates both sides and every message, and the engines' handshake\n" +
			"guards the data plane. RDMA_DEVICE_NAME (or XFER_DEVICE) names the RDMA device.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Flags()
			if !fs.Changed("local-host") {
				f.localHost = os.Getenv(envTestHost)
			}
			f.memoryMB, _ = fs.GetInt("memory-mb")
			plan, err := f.plan()
			if err != nil {
				return err
			}
			cfg, err := g.config(fs)
			if err != nil {
				return err
			}
			return transfer(cmd.Context(), g, cfg, plan)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.role, "role", "", "producer or consumer (required)")
	fs.StringVar(&f.localHost, "local-host", "", "this host's `address` for the data plane and, on the producer, the control channel (default $"+envTestHost+")")
	fs.StringVar(&f.remoteHost, "remote-host", "", "the other side's `address` (required on the consumer; the producer only checks ports with it)")
	fs.IntVar(&f.localPort, "local-port", transferDefaultPort, "`port` this side's engine listens on")
	fs.IntVar(&f.remotePort, "remote-port", transferDefaultPort, "`port` of the producer's engine (the consumer gets from it)")
	fs.IntVar(&f.ctrlPort, "ctrl-port", transferDefaultCtrlPort, "`port` of the control channel, on the producer's host")
	fs.IntVar(&f.sizeMB, "tensor-size-mb", transferDefaultSizeMB, "size of each tensor in `MiB`")
	fs.IntVar(&f.n, "num-transfers", transferDefaultN, "number of transfers")
	fs.StringVar(&f.mode, "mode", bench.ModeCopy, "how the producer makes tensors: copy (a Go tensor copied into the pool), zerocopy (made in the pool) or gpu (made in a pool on GPU --gpu-id: shm moves it with CUDA IPC, tcp through pinned host memory); the consumer reports the producer's, and with gpu receives into a pool on its own GPU")
	fs.IntVar(&f.gpuID, "gpu-id", 0, "GPU `index` for --mode gpu (its pool lives in that GPU's memory)")
	fs.BoolVar(&f.benchmark, "benchmark", false, "skip the MD5s: a pure performance run")
	fs.StringVar(&f.dtype, "dtype", "f32", "element type of the producer's tensors: f32 or u8")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per transfer and a summary object instead of text")
	fs.DurationVar(&f.timeout, "timeout", transferDefaultTimeout, "how long to wait for the other side, each of its messages, and each Get")
	fs.StringVar(&f.out, "out", "", "consumer: write the last tensor received to `FILE` in the safetensors format")
	fs.StringVar(&f.pull, "pull", "auto", "consumer: how a Get moves the tensor: auto, read (the consumer READs) or write (the producer WRITEs)")
	fs.String("transport", string(xfer.PolicyAuto), "transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.Int("memory-mb", 0, "registered pool of this side in `MiB` (default: twice the tensor plus 16 on the producer, the tensor plus 16 on the consumer)")
	fs.String("secret", "", "shared `secret` of the data plane (prefer "+envPrefix+"SECRET: flags show in ps)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	return cmd
}

// transfer runs one side of xfer transfer with the engine configuration
// cfg.
func transfer(ctx context.Context, g *globals, cfg xfer.Config, plan transferPlan) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
	}()
	out := newTransferOut(g.stdout, g.stderr, plan)
	defer out.clear()
	s, err := bench.Tensors(ctx, bench.TensorConfig{
		Engine: cfg, Role: plan.role,
		LocalHost: plan.localHost, RemoteHost: plan.remoteHost,
		LocalPort: plan.localPort, RemotePort: plan.remotePort, CtrlPort: plan.ctrlPort,
		N: plan.n, Mode: plan.mode, DType: plan.dtype, Shape: plan.shape, Size: plan.size,
		Benchmark: plan.benchmark, Timeout: plan.timeout, Out: plan.out, Pull: plan.pull,
		MemoryMB: plan.memoryMB, GPU: plan.gpu, GPUID: plan.gpuID,
		Logger: g.log,
		Say:    func(s string) { fmt.Fprintf(g.stderr, "xfer transfer: %s\n", s) },
		Each:   func(r bench.TensorResult) error { return out.add(r, plan.n) },
	})
	if err != nil {
		return err
	}
	if err := out.summary(s); err != nil {
		return err
	}
	if s.MD5Mismatches > 0 {
		return fmt.Errorf("the MD5 of %d of %d transfers did not match", s.MD5Mismatches, s.Transfers)
	}
	return nil
}
