package twin_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/transport/twin"
)

// TestMain fails the package's tests if any goroutine is left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTwin(testing.TB) transport.Transport { return twin.New() }

// The twin passes the same suite as tcp, shm and rdma.
func TestTransport(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newTwin})
}

func TestTransportMemfd(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newTwin, Config: transporttest.PairConfig{Memfd: true}})
}

// A peer in another process (another blob) is refused, with ErrNotSupported.
func TestOtherProcess(t *testing.T) {
	tr := twin.New()
	if err := tr.Usable(transport.PeerInfo{}, transport.PeerInfo{Blob: tr.LocalBlob()}); err != nil {
		t.Fatalf("a peer in this process: %v", err)
	}
	for _, blob := range [][]byte{nil, make([]byte, 16), append(tr.LocalBlob(), 0)} {
		err := tr.Usable(transport.PeerInfo{}, transport.PeerInfo{Blob: blob})
		if !errors.Is(err, transport.ErrNotSupported) {
			t.Fatalf("blob %x: %v, want an error matching ErrNotSupported", blob, err)
		}
	}
	other := func(testing.TB) transport.Transport { return otherProcess{twin.New()} }
	if _, err := transporttest.Connect(t, twin.New(), other(t), transporttest.PairConfig{}); !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("connect to a peer whose blob names another process: %v, want ErrNotSupported", err)
	}
}

// otherProcess is the twin with the blob another process would send.
type otherProcess struct{ *twin.Transport }

func (otherProcess) LocalBlob() []byte { return []byte("another process!") }
