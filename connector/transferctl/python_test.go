package transferctl

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/connector"
)

// pyModule is the Python side of the control channel, which follows this
// package's documentation.
const pyModule = "../../python/xfer/_transferctl.py"

// python returns the command that runs testdata/peer.py with args.
func python(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the Python side is not tested here")
	}
	return exec.Command(py, append([]string{"testdata/peer.py", pyModule}, args...)...)
}

var pyMeta = connector.Meta{Producer: "127.0.0.1:15500", Key: "producer/consumer/tensor-1", Size: 16, Kind: connector.KindTensor,
	DType: connector.F32, Shape: []int64{4}}

// TestPythonReencodes: Python decodes every message Go writes and writes
// it again byte for byte.
func TestPythonReencodes(t *testing.T) {
	yes, no := true, false
	meta := pyMeta
	var in bytes.Buffer
	for _, m := range []Msg{
		{Type: TypeHello, Transfers: 3, Bytes: 100 << 20, DType: "U8", Mode: "gpu", Benchmark: true},
		{Type: TypeReady, Pull: "read"},
		{Type: TypePut, Seq: 2, Meta: &meta, MD5: strings.Repeat("ab", 16), PutSeconds: 0.125},
		{Type: TypeGot, Seq: 2, MD5OK: &yes, Seconds: 1.5, Transport: "rdma"},
		{Type: TypeGot, Seq: 3, MD5OK: &no, Seconds: 2, Transport: "tcp"},
		{Type: TypeGot, Seq: 4},
		{Type: TypeError, Error: "transfer 1: get from «10.0.0.1»: \"refused\"\n\tretry <later> & again"},
	} {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
	}
	cmd := python(t, "reencode")
	cmd.Stdin = bytes.NewReader(in.Bytes())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v: %s", err, stderr(err))
	}
	if !bytes.Equal(out, in.Bytes()) {
		t.Fatalf("Go wrote:\n%s\nPython wrote it back as:\n%s", in.Bytes(), out)
	}
}

// TestPythonConsumer: a Go producer and a Python consumer make a run of
// one transfer, and the consumer gets the producer's error; without a
// secret and with one.
func TestPythonConsumer(t *testing.T) {
	eachSecret(t, pythonConsumer)
}

func pythonConsumer(t *testing.T, secret string) {
	addr, cmd, errOut := startPython(t, "consumer", secret)
	ctx := context.Background()
	c, m, err := Serve(ctx, ServeConfig{Addr: addr, Timeout: 10 * time.Second, Secret: secret,
		Hello: Msg{Type: TypeHello, Transfers: 1, Bytes: 16, DType: "F32", Mode: "copy"}})
	if err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	defer c.Close()
	if m.Pull != "read" {
		t.Fatalf("ready: %+v: %s", m, errOut.String())
	}
	meta := pyMeta
	if err := c.Send(Msg{Type: TypePut, Seq: 1, Meta: &meta, MD5: strings.Repeat("0f", 16), PutSeconds: 0.5}); err != nil {
		t.Fatal(err)
	}
	g, err := c.Recv(TypeGot)
	if err != nil || g.Seq != 1 || g.MD5OK == nil || !*g.MD5OK || g.Seconds != 0.25 || g.Transport != "tcp" {
		t.Fatalf("got: %+v, %v: %s", g, err, errOut.String())
	}
	c.Fail(errors.New("enough"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python consumer: %v: %s", err, errOut.String())
	}
}

// TestPythonProducer: a Python producer and a Go consumer make a run of
// one transfer under benchmark (no MD5s); a message out of turn from the
// producer is refused, and the producer is told why; without a secret and
// with one.
func TestPythonProducer(t *testing.T) {
	eachSecret(t, pythonProducer)
}

func pythonProducer(t *testing.T, secret string) {
	addr, cmd, errOut := startPython(t, "producer", secret)
	ctx := context.Background()
	c, h, err := Connect(ctx, addr, 10*time.Second, secret, func(string) {})
	if err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	defer c.Close()
	if h.Transfers != 1 || h.Bytes != 16 || h.DType != "F32" || h.Mode != "zerocopy" || !h.Benchmark {
		t.Fatalf("hello: %+v, %v: %s", h, err, errOut.String())
	}
	if err := c.Send(Msg{Type: TypeReady, Pull: "write"}); err != nil {
		t.Fatal(err)
	}
	p, err := c.Recv(TypePut)
	if err != nil || p.Seq != 1 || p.Meta == nil || !reflect.DeepEqual(*p.Meta, pyMeta) || p.MD5 != "" || p.PutSeconds != 0.5 {
		t.Fatalf("put: %+v, %v: %s", p, err, errOut.String())
	}
	if err := c.Send(Msg{Type: TypeGot, Seq: 1, Seconds: 0.25, Transport: "shm"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Recv(TypePut)
	if err == nil || !strings.Contains(err.Error(), `the producer sent a "got" message where a "put" was due`) {
		t.Fatalf("a got out of turn: %v", err)
	}
	c.Fail(err)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python producer: %v: %s", err, errOut.String())
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
// eachSecret runs test without a secret and with one.
func eachSecret(t *testing.T, test func(t *testing.T, secret string)) {
	for _, secret := range []string{"", testSecret} {
		t.Run(map[bool]string{false: "open", true: "secret"}[secret != ""], func(t *testing.T) { test(t, secret) })
	}
}

// startPython starts the Python side of a run in role, on a free loopback
// address, which it returns with the process and its stderr; the process
// is killed when the test ends.
func startPython(t *testing.T, role, secret string) (addr string, cmd *exec.Cmd, errOut *bytes.Buffer) {
	addr = freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	cmd = python(t, role, host, port, secret)
	errOut = new(bytes.Buffer)
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return addr, cmd, errOut
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func stderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
