package main

import (
	"context"
	"crypto/md5"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/connector/transferctl"
	"github.com/xferio/xfer/mem"
)

// The stages the tool's tensors go between, and the keys they go under.
const (
	transferFrom = "producer"
	transferTo   = "consumer"
)

func transferKey(i int) string { return "tensor-" + strconv.Itoa(i) }

// transfer runs one side of xfer transfer with the engine configuration
// cfg.
func transfer(ctx context.Context, g *globals, cfg xfer.Config, plan transferPlan) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
	}()
	sizeMB := int(plan.size >> 20)
	switch {
	case cfg.MemoryMB == 0:
		cfg.MemoryMB = plan.memoryMB
	case cfg.MemoryMB <= sizeMB:
		return fmt.Errorf("memory_mb %d: the pool must hold a tensor of %d MiB and the control messages: give at least %d (--memory-mb)", cfg.MemoryMB, sizeMB, sizeMB+1)
	}
	cfg.Listen = net.JoinHostPort(plan.localHost, strconv.Itoa(plan.localPort))
	if plan.gpu {
		cfg.MemoryDevice = mem.CUDA(plan.gpuID)
	}
	say := func(s string) { fmt.Fprintf(g.stderr, "xfer transfer: %s\n", s) }
	c, err := connector.Open(ctx, connector.Config{
		Engine:        cfg,
		Role:          plan.role,
		Pull:          plan.pull,
		WaitForMemory: true, // bounded by --timeout
		Logger:        g.log,
	})
	if err != nil {
		return fmt.Errorf("open the %v's connector on %s: %w", plan.role, cfg.Listen, err)
	}
	defer c.Close()
	out := newTransferOut(g.stdout, g.stderr, plan)
	defer out.clear()
	sum := transferSummary{
		Role: plan.role.String(), Mode: plan.mode, Pull: c.Pull().String(), DType: plan.dtype.String(),
		TensorBytes: plan.size, MemoryMB: cfg.MemoryMB,
	}
	start := time.Now()
	if plan.role == connector.RoleProducer {
		err = produce(ctx, c, plan, out, &sum, say)
	} else {
		err = consume(ctx, c, plan, out, &sum, say)
	}
	if err != nil {
		return err
	}
	sum.WallSeconds = time.Since(start).Seconds()
	s, err := out.summary(sum)
	if err != nil {
		return err
	}
	if s.MD5Mismatches > 0 {
		return fmt.Errorf("the MD5 of %d of %d transfers did not match", s.MD5Mismatches, s.Transfers)
	}
	return nil
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
func produce(ctx context.Context, c *connector.Connector, plan transferPlan, out *transferOut, sum *transferSummary, say func(string)) error {
	e := c.Engine()
	refused := func(remote, reason string, err error) { e.AuthFailed(xfer.PlaneTransfer, reason, remote, err) }
	cc, err := transferctl.Serve(ctx, net.JoinHostPort(plan.localHost, strconv.Itoa(plan.ctrlPort)), plan.timeout, 0, e.Config().Secret, say, refused)
	if err != nil {
		return err
	}
	defer cc.Close()
	fail := cc.Fail
	hello := transferctl.Msg{Type: transferctl.TypeHello, Transfers: plan.n, Bytes: plan.size, DType: plan.dtype.String(), Mode: plan.mode, Benchmark: plan.benchmark}
	if err := cc.Send(hello); err != nil {
		return err
	}
	ready, err := cc.Recv(transferctl.TypeReady)
	if err != nil {
		return err
	}
	if ready.Pull != "" {
		sum.Pull = ready.Pull // the consumer's Gets choose
	}
	var seed [32]byte
	cryptorand.Read(seed[:])
	rng := rand.NewChaCha8(seed)
	var heap []byte
	if plan.mode == modeCopy {
		heap = make([]byte, plan.size)
	}
	for i := 1; i <= plan.n; i++ {
		key := transferKey(i)
		var meta connector.Meta
		var md5sum string
		var put time.Duration
		var scratch []byte // a GPU tensor's bytes, made in host memory
		opCtx, cancel := context.WithTimeout(ctx, plan.timeout)
		if plan.mode == modeCopy {
			rng.Read(heap)
			if !plan.benchmark {
				md5sum = md5Hex(heap)
			}
			t0 := time.Now()
			_, meta, err = c.Put(opCtx, transferFrom, transferTo, key, connector.Tensor{DType: plan.dtype, Shape: plan.shape, Data: heap})
			put = time.Since(t0)
		} else {
			t0 := time.Now()
			var b *connector.Buffer
			b, err = c.AllocTensor(opCtx, plan.dtype, plan.shape)
			put = time.Since(t0)
			if err == nil && b.Location().IsHost() {
				rng.Read(b.Bytes())
				if !plan.benchmark {
					md5sum = md5Hex(b.Bytes())
				}
			} else if err == nil {
				if scratch == nil {
					scratch = make([]byte, plan.size)
				}
				rng.Read(scratch)
				if !plan.benchmark {
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
		if !plan.benchmark && got.MD5OK == nil {
			return fail(fmt.Errorf("transfer %d: the consumer sent no MD5 verdict", i))
		}
		sum.Transport = got.Transport
		r := transferResult{Role: "producer", Transfer: i, Bytes: plan.size, Seconds: got.Seconds,
			BytesPerSec: rate(plan.size, got.Seconds), PutSeconds: put.Seconds(), PutBytesPerSec: rate(plan.size, put.Seconds()),
			MD5OK: got.MD5OK}
		r.GBps = r.BytesPerSec / 1e9
		if !plan.benchmark {
			r.MD5 = &md5sum
		}
		if err := out.add(r, plan.n); err != nil {
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
func consume(ctx context.Context, c *connector.Connector, plan transferPlan, out *transferOut, sum *transferSummary, say func(string)) error {
	cc, err := transferctl.Connect(ctx, net.JoinHostPort(plan.remoteHost, strconv.Itoa(plan.ctrlPort)), plan.timeout, c.Engine().Config().Secret, say)
	if err != nil {
		return err
	}
	defer cc.Close()
	fail := cc.Fail
	hello, err := cc.Recv(transferctl.TypeHello)
	if err != nil {
		return err
	}
	sum.Mode, sum.DType = hello.Mode, hello.DType
	switch {
	case hello.Transfers != plan.n:
		return fail(fmt.Errorf("the producer makes %d transfers and the consumer expects %d: give both the same --num-transfers", hello.Transfers, plan.n))
	case hello.Bytes != plan.size:
		return fail(fmt.Errorf("the producer sends tensors of %s and the consumer expects %s: give both the same --tensor-size-mb", bytesize.Format(hello.Bytes), bytesize.Format(plan.size)))
	case hello.Benchmark != plan.benchmark:
		return fail(fmt.Errorf("--benchmark is on one side only: give it to both or neither"))
	}
	if err := cc.Send(transferctl.Msg{Type: transferctl.TypeReady, Pull: c.Pull().String()}); err != nil {
		return err
	}
	producer := net.JoinHostPort(plan.remoteHost, strconv.Itoa(plan.remotePort))
	for i := 1; i <= plan.n; i++ {
		m, err := cc.Recv(transferctl.TypePut)
		if err != nil {
			return fail(atTransfer(i, err))
		}
		switch {
		case m.Seq != i:
			return fail(fmt.Errorf("transfer %d: the producer sent transfer %d", i, m.Seq))
		case m.Meta == nil:
			return fail(fmt.Errorf("transfer %d: the producer sent no metadata", i))
		case !plan.benchmark && len(m.MD5) != 2*md5.Size:
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
		opCtx, cancel := context.WithTimeout(ctx, plan.timeout)
		t0 := time.Now()
		b, size, err := c.Get(opCtx, parts[0], parts[1], parts[2], &meta)
		d := time.Since(t0)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("transfer %d: get from %s: %w", i, producer, err))
		}
		r := transferResult{Role: "consumer", Transfer: i, Bytes: size, Seconds: d.Seconds(), BytesPerSec: rate(size, d.Seconds()),
			PutSeconds: m.PutSeconds, PutBytesPerSec: rate(size, m.PutSeconds)}
		r.GBps = r.BytesPerSec / 1e9
		if size != plan.size {
			b.Release()
			return fail(fmt.Errorf("transfer %d: got %d bytes, want %d", i, size, plan.size))
		}
		if !plan.benchmark {
			host, err := b.HostBytes()
			if err != nil {
				b.Release()
				return fail(fmt.Errorf("transfer %d: %w", i, err))
			}
			s := md5Hex(host)
			ok := s == m.MD5
			r.MD5, r.MD5OK = &s, &ok
		}
		if i == plan.n && plan.out != "" {
			if err := writeTensorFile(plan.out, b, meta, r.MD5); err != nil {
				b.Release()
				return fail(fmt.Errorf("--out %s: %w", plan.out, err))
			}
		}
		b.Release()
		if err := cc.Send(transferctl.Msg{Type: transferctl.TypeGot, Seq: i, MD5OK: r.MD5OK, Seconds: r.Seconds, Transport: peerTransport(c)}); err != nil {
			return err
		}
		if err := out.add(r, plan.n); err != nil {
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
