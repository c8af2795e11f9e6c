package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/connector/transferctl"
	"github.com/xferio/xfer/probe"
)

// The transfer command's defaults: the ports and sizes of the cross-node
// script of vLLM-Omni's Mooncake connector guide, which it mirrors.
const (
	transferDefaultPort     = 15500
	transferDefaultCtrlPort = transferctl.DefaultPort
	transferDefaultSizeMB   = 100
	transferDefaultN        = 3
	transferDefaultTimeout  = 60 * time.Second
	// transferMaxSizeMB bounds --tensor-size-mb: a pool of twice that
	// must stay within xfer's largest (memory_mb 1048576).
	transferMaxSizeMB = 256 << 10
	// envTestHost is the default of --local-host.
	envTestHost = "RDMA_TEST_HOST"
)

// noCUDA is what --mode gpu says where there is no CUDA: the driver's
// reason and fix, and what works meanwhile.
func noCUDA(err error) error {
	return fmt.Errorf("--mode gpu: %w\n"+
		"Meanwhile --mode copy or --mode zerocopy move the same tensors through host memory", err)
}

// transferFlags are transfer's own flags; the engine's (--transport,
// --memory-mb, --secret) go through the configuration.
type transferFlags struct {
	role       string
	localHost  string
	remoteHost string
	localPort  int
	remotePort int
	ctrlPort   int
	sizeMB     int
	n          int
	mode       string
	gpuID      int
	benchmark  bool
	dtype      string
	json       bool
	timeout    time.Duration
	out        string
	pull       string
	memoryMB   int // 0: derived from the tensor
}

// transferPlan is the validated form of transferFlags.
type transferPlan struct {
	role       connector.Role
	localHost  string
	remoteHost string
	localPort  int
	remotePort int
	ctrlPort   int
	n          int
	mode       string
	benchmark  bool
	dtype      connector.DType
	shape      []int64
	size       int64 // bytes of one tensor
	json       bool
	timeout    time.Duration
	out        string
	pull       connector.Pull
	memoryMB   int
	gpu        bool // --mode gpu on this side: its pool is on GPU gpuID
	gpuID      int
}

// plan validates the flags.
func (f transferFlags) plan() (transferPlan, error) {
	p := transferPlan{n: f.n, mode: f.mode, benchmark: f.benchmark, json: f.json, timeout: f.timeout, out: f.out,
		localHost: f.localHost, remoteHost: f.remoteHost, localPort: f.localPort, remotePort: f.remotePort, ctrlPort: f.ctrlPort}
	switch f.role {
	case "producer":
		p.role = connector.RoleProducer
	case "consumer":
		p.role = connector.RoleConsumer
	case "":
		return p, errors.New("--role is required: producer or consumer")
	default:
		return p, fmt.Errorf("--role %q: must be producer or consumer", f.role)
	}
	switch f.mode {
	case bench.ModeCopy, bench.ModeZeroCopy:
	case bench.ModeGPU:
		if f.gpuID < 0 || f.gpuID > 255 {
			return p, fmt.Errorf("--gpu-id %d: must be from 0 to 255", f.gpuID)
		}
		if err := probe.CUDA(); err != nil {
			return p, noCUDA(err)
		}
		p.gpu, p.gpuID = true, f.gpuID
	default:
		return p, fmt.Errorf("--mode %q: must be copy, zerocopy or gpu", f.mode)
	}
	if f.gpuID != 0 && !p.gpu {
		return p, fmt.Errorf("--gpu-id %d: only with --mode gpu", f.gpuID)
	}
	if f.sizeMB < 1 || f.sizeMB > transferMaxSizeMB {
		return p, fmt.Errorf("--tensor-size-mb %d: must be between 1 and %d", f.sizeMB, transferMaxSizeMB)
	}
	if f.n < 1 {
		return p, fmt.Errorf("--num-transfers %d: must be at least 1", f.n)
	}
	if f.timeout <= 0 {
		return p, fmt.Errorf("--timeout %v: must be positive", f.timeout)
	}
	switch strings.ToLower(f.dtype) {
	case "f32", "float32":
		p.dtype = connector.F32
	case "u8", "uint8":
		p.dtype = connector.U8
	default:
		return p, fmt.Errorf("--dtype %q: must be f32 or u8", f.dtype)
	}
	// A 2-D tensor: one row per MiB.
	p.shape = []int64{int64(f.sizeMB), (1 << 20) / int64(p.dtype.Size())}
	p.size = int64(f.sizeMB) << 20
	var err error
	if p.pull, err = connector.ParsePull(f.pull); err != nil {
		return p, fmt.Errorf("--pull: %w", err)
	}
	if p.localHost == "" {
		return p, fmt.Errorf("--local-host is required: this host's address for the data plane (or set $%s)", envTestHost)
	}
	if p.role == connector.RoleConsumer && p.remoteHost == "" {
		return p, errors.New("--remote-host is required on the consumer: the producer's address")
	}
	for _, pf := range []struct {
		name string
		v    int
	}{{"local-port", f.localPort}, {"remote-port", f.remotePort}, {"ctrl-port", f.ctrlPort}} {
		if pf.v < 1 || pf.v > 65535 {
			return p, fmt.Errorf("--%s %d: must be between 1 and 65535", pf.name, pf.v)
		}
	}
	if p.role == connector.RoleProducer && f.localPort == f.ctrlPort {
		return p, fmt.Errorf("--local-port and --ctrl-port are both %d: the producer listens on both, they must differ", f.ctrlPort)
	}
	if p.role == connector.RoleConsumer && f.remotePort == f.ctrlPort {
		return p, fmt.Errorf("--remote-port and --ctrl-port are both %d: the producer listens on both, they must differ", f.ctrlPort)
	}
	if p.remoteHost != "" && sameHost(p.localHost, p.remoteHost) {
		if f.localPort == f.remotePort {
			return p, fmt.Errorf("--local-port and --remote-port are both %d on the same host (%s and %s): "+
				"on one host the two sides need different ports, e.g. the producer --local-port %d --remote-port %d and the consumer --local-port %d --remote-port %d",
				f.localPort, p.localHost, p.remoteHost, f.localPort, f.localPort+2, f.localPort+2, f.localPort)
		}
		if p.role == connector.RoleConsumer && f.localPort == f.ctrlPort {
			return p, fmt.Errorf("--local-port and --ctrl-port are both %d on the producer's host: the producer's control channel listens there", f.ctrlPort)
		}
	}
	if p.out != "" {
		if p.role != connector.RoleConsumer {
			return p, errors.New("--out is the consumer's: it writes the last tensor it received")
		}
		if err := checkWritable(p.out); err != nil {
			return p, fmt.Errorf("--out %s: %w", p.out, err)
		}
	}
	mb := f.sizeMB + 16
	if p.role == connector.RoleProducer {
		// The next tensor may be put before the consumer's release of
		// the last one has reached the producer.
		mb += f.sizeMB
	}
	switch {
	case f.memoryMB < 0:
		return p, fmt.Errorf("--memory-mb %d: must not be negative", f.memoryMB)
	case f.memoryMB > 0 && f.memoryMB <= f.sizeMB:
		return p, fmt.Errorf("--memory-mb %d: the pool must hold a tensor of %d MiB and the control messages: give at least %d", f.memoryMB, f.sizeMB, f.sizeMB+1)
	case f.memoryMB > 0:
		mb = f.memoryMB
	}
	p.memoryMB = mb
	return p, nil
}

// sameHost reports whether two host names or addresses name the same host
// as far as the flags tell: equal, or both loopback.
func sameHost(a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	loop := func(h string) bool {
		if strings.EqualFold(h, "localhost") {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return loop(a) && loop(b)
}
