package bench

import (
	"context"
	"crypto/md5"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/connector/transferctl"
	"github.com/xferio/xfer/mem"
)

// TensorResult is one transfer as a side saw it. Seconds is the
// consumer's Get; PutSeconds the producer's Put (see the command's help).
type TensorResult struct {
	Role           string  `json:"role"`
	Transfer       int     `json:"transfer"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`
	BytesPerSec    float64 `json:"bytes_per_sec"`
	GBps           float64 `json:"gbps"`
	PutSeconds     float64 `json:"put_seconds"`
	PutBytesPerSec float64 `json:"put_bytes_per_sec"`
	MD5            *string `json:"md5"`    // null under --benchmark
	MD5OK          *bool   `json:"md5_ok"` // null under --benchmark
}

// TensorSummary sums a side's transfers up.
type TensorSummary struct {
	Summary        bool    `json:"summary"` // always true: tells the summary line from the others
	Role           string  `json:"role"`
	Transfers      int     `json:"transfers"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`       // the Gets, summed
	BytesPerSec    float64 `json:"bytes_per_sec"` // Bytes / Seconds
	GBpsMedian     float64 `json:"gbps_median"`   // of the transfers' get GB/s
	GBpsMin        float64 `json:"gbps_min"`
	GBpsMax        float64 `json:"gbps_max"`
	PutSeconds     float64 `json:"put_seconds"`
	PutBytesPerSec float64 `json:"put_bytes_per_sec"`
	E2EBytesPerSec float64 `json:"e2e_bytes_per_sec"` // Bytes / (Seconds + PutSeconds)
	MD5OK          *bool   `json:"md5_ok"`            // all matched; null under --benchmark
	MD5Mismatches  int     `json:"md5_mismatches"`
	Mode           string  `json:"mode"`
	Transport      string  `json:"transport"`
	Pull           string  `json:"pull"`
	DType          string  `json:"dtype"`
	TensorBytes    int64   `json:"tensor_bytes"`
	WallSeconds    float64 `json:"wall_seconds"` // from the first transfer's start to the last's end
	MemoryMB       int     `json:"memory_mb"`    // this side's pool
}

// rate is n bytes over secs, per second (0 when secs is 0).
func rate(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// summarize fills in s's sums over results: counts, bytes, times, rates,
// the spread of the Gets' GB/s and the MD5 verdict.
func summarize(s TensorSummary, results []TensorResult) TensorSummary {
	var gbps []float64
	for _, r := range results {
		s.Transfers++
		s.Bytes += r.Bytes
		s.Seconds += r.Seconds
		s.PutSeconds += r.PutSeconds
		gbps = append(gbps, r.GBps)
		if r.MD5OK != nil && !*r.MD5OK {
			s.MD5Mismatches++
		}
	}
	s.Summary = true
	s.BytesPerSec = rate(s.Bytes, s.Seconds)
	s.PutBytesPerSec = rate(s.Bytes, s.PutSeconds)
	s.E2EBytesPerSec = rate(s.Bytes, s.Seconds+s.PutSeconds)
	if len(gbps) > 0 {
		slices.Sort(gbps)
		s.GBpsMin, s.GBpsMax = gbps[0], gbps[len(gbps)-1]
		if m := len(gbps) / 2; len(gbps)%2 == 1 {
			s.GBpsMedian = gbps[m]
		} else {
			s.GBpsMedian = (gbps[m-1] + gbps[m]) / 2
		}
	}
	if len(results) > 0 && results[0].MD5OK != nil {
		ok := s.MD5Mismatches == 0
		s.MD5OK = &ok
	}
	return s
}

// The transfer modes.
const (
	ModeCopy     = "copy"
	ModeZeroCopy = "zerocopy"
	ModeGPU      = "gpu"
)

// The stages the tool's tensors go between, and the keys they go under.
const (
	transferFrom = "producer"
	transferTo   = "consumer"
)

func transferKey(i int) string { return "tensor-" + strconv.Itoa(i) }

// TensorConfig is one side of a tensor transfer run, the driver of xfer
// transfer: a producer puts N tensors through the connector and a consumer
// gets them, across hosts, told of each by the control channel
// (connector/transferctl).
type TensorConfig struct {
	// Engine configures the side's engine; its Listen becomes
	// LocalHost:LocalPort, and a MemoryMB of 0 becomes MemoryMB.
	Engine xfer.Config
	Role   connector.Role
	// LocalHost and LocalPort are this side's data plane (and, on the
	// producer, the host of the control channel); RemoteHost and
	// RemotePort the producer's, where the consumer gets from. CtrlPort
	// is the control channel's, on the producer's host.
	LocalHost, RemoteHost           string
	LocalPort, RemotePort, CtrlPort int
	// N tensors of Size bytes, of DType in Shape, made as Mode says.
	N     int
	Mode  string // ModeCopy, ModeZeroCopy or ModeGPU
	DType connector.DType
	Shape []int64
	Size  int64
	// Benchmark skips the MD5s.
	Benchmark bool
	// Timeout bounds the wait for the other side, each of its messages,
	// and each Put and Get.
	Timeout time.Duration
	// Out, on the consumer, is a file to write the last tensor to (the
	// safetensors format); "": none.
	Out  string
	Pull connector.Pull
	// MemoryMB is the pool when Engine.MemoryMB is 0.
	MemoryMB int
	// GPU: this side's pool lives on GPU GPUID.
	GPU   bool
	GPUID int
	// Logger receives the connector's logs; Say the control channel's
	// news (the other side connected, ...). Default: none.
	Logger *slog.Logger
	Say    func(string)
	// Each, when set, is called with each transfer's result as it
	// completes.
	Each func(TensorResult) error
}

// Tensors runs one side of a tensor transfer run and returns its summary
// (a summary with MD5 mismatches is no error: the caller reports it).
func Tensors(ctx context.Context, tc TensorConfig) (TensorSummary, error) {
	cfg := tc.Engine
	sizeMB := int(tc.Size >> 20)
	switch {
	case cfg.MemoryMB == 0:
		cfg.MemoryMB = tc.MemoryMB
	case cfg.MemoryMB <= sizeMB:
		return TensorSummary{}, fmt.Errorf("memory_mb %d: the pool must hold a tensor of %d MiB and the control messages: give at least %d (--memory-mb)", cfg.MemoryMB, sizeMB, sizeMB+1)
	}
	cfg.Listen = net.JoinHostPort(tc.LocalHost, strconv.Itoa(tc.LocalPort))
	if tc.GPU {
		cfg.MemoryDevice = mem.CUDA(tc.GPUID)
	}
	say := tc.Say
	if say == nil {
		say = func(string) {}
	}
	logger := tc.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c, err := connector.Open(ctx, connector.Config{
		Engine:        cfg,
		Role:          tc.Role,
		Pull:          tc.Pull,
		WaitForMemory: true, // bounded by --timeout
		Logger:        logger,
	})
	if err != nil {
		return TensorSummary{}, fmt.Errorf("open the %v's connector on %s: %w", tc.Role, cfg.Listen, err)
	}
	defer c.Close()
	var results []TensorResult
	add := func(r TensorResult) error {
		results = append(results, r)
		if tc.Each != nil {
			return tc.Each(r)
		}
		return nil
	}
	sum := TensorSummary{
		Role: tc.Role.String(), Mode: tc.Mode, Pull: c.Pull().String(), DType: tc.DType.String(),
		TensorBytes: tc.Size, MemoryMB: cfg.MemoryMB,
	}
	start := time.Now()
	if tc.Role == connector.RoleProducer {
		err = produce(ctx, c, tc, add, &sum, say)
	} else {
		err = consume(ctx, c, tc, add, &sum, say)
	}
	if err != nil {
		return TensorSummary{}, err
	}
	sum.WallSeconds = time.Since(start).Seconds()
	return summarize(sum, results), nil
}

// peerTransport is the transport the connector's engine moved data over
// ("" before it had a peer).
func peerTransport(c *connector.Connector) string {
	for _, p := range c.Engine().Peers() {
		if t := p.Transport(); t != "" {
			return t
		}
	}
	return ""
}

// atTransfer names transfer i in err, unless err is the other side's,
// which names it already.
func atTransfer(i int, err error) error {
	var pe *transferctl.PeerError
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("transfer %d: %w", i, err)
}

func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// produce is the producer's side; it sets the transport in sum.
func produce(ctx context.Context, c *connector.Connector, tc TensorConfig, add func(TensorResult) error, sum *TensorSummary, say func(string)) error {
	e := c.Engine()
	refused := func(remote, reason string, err error) { e.AuthFailed(xfer.PlaneTransfer, reason, remote, err) }
	hello := transferctl.Msg{Type: transferctl.TypeHello, Transfers: tc.N, Bytes: tc.Size, DType: tc.DType.String(), Mode: tc.Mode, Benchmark: tc.Benchmark}
	cc, ready, err := transferctl.Serve(ctx, transferctl.ServeConfig{
		Addr:    net.JoinHostPort(tc.LocalHost, strconv.Itoa(tc.CtrlPort)),
		Timeout: tc.Timeout, HandshakeTimeout: e.Config().HandshakeTimeout,
		Secret: e.Config().Secret, Hello: hello, Say: say, Refused: refused,
	})
	if err != nil {
		return err
	}
	defer cc.Close()
	fail := cc.Fail
	if ready.Pull != "" {
		sum.Pull = ready.Pull // the consumer's Gets choose
	}
	var seed [32]byte
	cryptorand.Read(seed[:])
	rng := rand.NewChaCha8(seed)
	var heap []byte
	if tc.Mode == ModeCopy {
		heap = make([]byte, tc.Size)
	}
	for i := 1; i <= tc.N; i++ {
		key := transferKey(i)
		var meta connector.Meta
		var md5sum string
		var put time.Duration
		var scratch []byte // a GPU tensor's bytes, made in host memory
		opCtx, cancel := context.WithTimeout(ctx, tc.Timeout)
		if tc.Mode == ModeCopy {
			rng.Read(heap)
			if !tc.Benchmark {
				md5sum = md5Hex(heap)
			}
			t0 := time.Now()
			_, meta, err = c.Put(opCtx, transferFrom, transferTo, key, connector.Tensor{DType: tc.DType, Shape: tc.Shape, Data: heap})
			put = time.Since(t0)
		} else {
			t0 := time.Now()
			var b *connector.Buffer
			b, err = c.AllocTensor(opCtx, tc.DType, tc.Shape)
			put = time.Since(t0)
			if err == nil && b.Location().IsHost() {
				rng.Read(b.Bytes())
				if !tc.Benchmark {
					md5sum = md5Hex(b.Bytes())
				}
			} else if err == nil {
				if scratch == nil {
					scratch = make([]byte, tc.Size)
				}
				rng.Read(scratch)
				if !tc.Benchmark {
					md5sum = md5Hex(scratch)
				}
				err = c.Engine().Copy(b.Bytes(), scratch)
			}
			if err == nil {
				t1 := time.Now()
				_, meta, err = c.PutBuffer(opCtx, transferFrom, transferTo, key, b)
				put += time.Since(t1)
			}
		}
		cancel()
		if err != nil {
			return fail(fmt.Errorf("transfer %d: put: %w", i, err))
		}
		if err := cc.Send(transferctl.Msg{Type: transferctl.TypePut, Seq: i, Meta: &meta, MD5: md5sum, PutSeconds: put.Seconds()}); err != nil {
			return err
		}
		got, err := cc.Recv(transferctl.TypeGot)
		if err != nil {
			return fail(atTransfer(i, err))
		}
		if got.Seq != i {
			return fail(fmt.Errorf("transfer %d: the consumer answered for transfer %d", i, got.Seq))
		}
		if !tc.Benchmark && got.MD5OK == nil {
			return fail(fmt.Errorf("transfer %d: the consumer sent no MD5 verdict", i))
		}
		sum.Transport = got.Transport
		r := TensorResult{Role: "producer", Transfer: i, Bytes: tc.Size, Seconds: got.Seconds,
			BytesPerSec: rate(tc.Size, got.Seconds), PutSeconds: put.Seconds(), PutBytesPerSec: rate(tc.Size, put.Seconds()),
			MD5OK: got.MD5OK}
		r.GBps = r.BytesPerSec / 1e9
		if !tc.Benchmark {
			r.MD5 = &md5sum
		}
		if err := add(r); err != nil {
			return err
		}
	}
	if t := peerTransport(c); t != "" {
		sum.Transport = t
	}
	return nil
}

// consume is the consumer's side; it sets the transport in sum, and the
// producer's mode and dtype, which make the tensors.
func consume(ctx context.Context, c *connector.Connector, tc TensorConfig, add func(TensorResult) error, sum *TensorSummary, say func(string)) error {
	cc, hello, err := transferctl.Connect(ctx, net.JoinHostPort(tc.RemoteHost, strconv.Itoa(tc.CtrlPort)), tc.Timeout, c.Engine().Config().Secret, say)
	if err != nil {
		return err
	}
	defer cc.Close()
	fail := cc.Fail
	sum.Mode, sum.DType = hello.Mode, hello.DType
	switch {
	case hello.Transfers != tc.N:
		return fail(fmt.Errorf("the producer makes %d transfers and the consumer expects %d: give both the same --num-transfers", hello.Transfers, tc.N))
	case hello.Bytes != tc.Size:
		return fail(fmt.Errorf("the producer sends tensors of %s and the consumer expects %s: give both the same --tensor-size-mb", bytesize.Format(hello.Bytes), bytesize.Format(tc.Size)))
	case hello.Benchmark != tc.Benchmark:
		return fail(fmt.Errorf("--benchmark is on one side only: give it to both or neither"))
	}
	if err := cc.Send(transferctl.Msg{Type: transferctl.TypeReady, Pull: c.Pull().String()}); err != nil {
		return err
	}
	producer := net.JoinHostPort(tc.RemoteHost, strconv.Itoa(tc.RemotePort))
	for i := 1; i <= tc.N; i++ {
		m, err := cc.Recv(transferctl.TypePut)
		if err != nil {
			return fail(atTransfer(i, err))
		}
		switch {
		case m.Seq != i:
			return fail(fmt.Errorf("transfer %d: the producer sent transfer %d", i, m.Seq))
		case m.Meta == nil:
			return fail(fmt.Errorf("transfer %d: the producer sent no metadata", i))
		case !tc.Benchmark && len(m.MD5) != 2*md5.Size:
			return fail(fmt.Errorf("transfer %d: the producer sent no MD5 (%q)", i, m.MD5))
		}
		meta := *m.Meta
		// The data plane is where --remote-host and --remote-port say,
		// whatever address the producer's engine advertises.
		meta.Producer = producer
		parts := strings.SplitN(meta.Key, "/", 3)
		if len(parts) != 3 {
			return fail(fmt.Errorf("transfer %d: the producer sent the key %q, not from/to/key", i, meta.Key))
		}
		opCtx, cancel := context.WithTimeout(ctx, tc.Timeout)
		t0 := time.Now()
		b, size, err := c.Get(opCtx, parts[0], parts[1], parts[2], &meta)
		d := time.Since(t0)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("transfer %d: get from %s: %w", i, producer, err))
		}
		r := TensorResult{Role: "consumer", Transfer: i, Bytes: size, Seconds: d.Seconds(), BytesPerSec: rate(size, d.Seconds()),
			PutSeconds: m.PutSeconds, PutBytesPerSec: rate(size, m.PutSeconds)}
		r.GBps = r.BytesPerSec / 1e9
		if size != tc.Size {
			b.Release()
			return fail(fmt.Errorf("transfer %d: got %d bytes, want %d", i, size, tc.Size))
		}
		if !tc.Benchmark {
			host, err := b.HostBytes()
			if err != nil {
				b.Release()
				return fail(fmt.Errorf("transfer %d: %w", i, err))
			}
			s := md5Hex(host)
			ok := s == m.MD5
			r.MD5, r.MD5OK = &s, &ok
		}
		if i == tc.N && tc.Out != "" {
			if err := writeTensorFile(tc.Out, b, meta, r.MD5); err != nil {
				b.Release()
				return fail(fmt.Errorf("--out %s: %w", tc.Out, err))
			}
		}
		b.Release()
		if err := cc.Send(transferctl.Msg{Type: transferctl.TypeGot, Seq: i, MD5OK: r.MD5OK, Seconds: r.Seconds, Transport: peerTransport(c)}); err != nil {
			return err
		}
		if err := add(r); err != nil {
			return err
		}
	}
	sum.Transport = peerTransport(c)
	return nil
}

// writeTensorFile writes the tensor in b as a safetensors file holding
// one tensor, "tensor", with the key, the producer and the MD5 (when
// checked) as metadata: what a Python program reads with
// safetensors.numpy.load_file or safetensors.torch.load_file.
func writeTensorFile(path string, b *connector.Buffer, meta connector.Meta, sum *string) error {
	t, err := b.Tensor()
	if err != nil {
		return err
	}
	md := map[string]string{"key": meta.Key, "producer": meta.Producer}
	if sum != nil {
		md["md5"] = *sum
	}
	head, n, err := connector.AppendSafetensorsHeader(nil, map[string]connector.Tensor{"tensor": t}, md)
	if err != nil {
		return err
	}
	if n != int64(len(t.Data)) {
		return fmt.Errorf("the header describes %d bytes of data, the tensor has %d", n, len(t.Data))
	}
	data, err := b.HostBytes() // a copy when the pool is on a GPU
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(head); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
