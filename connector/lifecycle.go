package connector

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
)

// Open starts a connector and the engine it owns.
func Open(ctx context.Context, cfg Config) (*Connector, error) {
	if cfg.Role > RoleConsumer {
		return nil, fmt.Errorf("connector: config: role %d: want producer, consumer or both", cfg.Role)
	}
	if cfg.Pull > PullWrite {
		return nil, fmt.Errorf("connector: config: pull %d: want auto, read or write", cfg.Pull)
	}
	if cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("connector: config: chunk size %d: must not be negative", cfg.ChunkSize)
	}
	chunkAuto := cfg.ChunkSize == 0
	if chunkAuto {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Role != RoleConsumer && cfg.Engine.Listen == "" {
		return nil, fmt.Errorf("connector: config: a %v must listen: set Engine.Listen (\":0\" picks a port)", cfg.Role)
	}
	ecfg := cfg.Engine.Clone()
	ecfg.HoldPeers = true // until New is done (Ready below)
	if ecfg.Logger == nil {
		ecfg.Logger = cfg.Logger
	}
	if ecfg.MaxMessage != 0 && ecfg.MaxMessage < maxControl {
		return nil, fmt.Errorf("connector: config: max_message %d: the connector's control messages need at least %d", ecfg.MaxMessage, maxControl)
	}
	eng, err := xfer.Open(ctx, ecfg)
	if err != nil {
		return nil, fmt.Errorf("connector: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = eng.Config().Logger // the engine's default: warn and above, to stderr
	}
	bound, probeWait := callTimeout(cfg.CallTimeout, eng)
	c := &Connector{
		bound:     bound,
		probeWait: probeWait,
		cfg:       cfg,
		spin:      waitSpin(cfg.WaitSpin),
		eng:       eng,
		log:       log,
		pull:      cfg.Pull,
		chunkAuto: chunkAuto,
		slots:     make(map[string]*slot),
		wait:      make(map[string][]*waiter),
		claims:    make(map[claimKey]*claim),
		remote:    make(map[*xfer.Peer]*remote),
		inline:    eng.Config().MemoryDevice.IsHost(),
	}
	c.calls = callbound.New(c.bound)
	if c.pull == PullAuto {
		c.pull = PullWrite
	}
	if c.ctrl, err = newCtrlPool(eng); err != nil {
		eng.Close()
		return nil, fmt.Errorf("connector: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if cfg.Role != RoleConsumer || cfg.Engine.Listen != "" {
		// A consumer that listens accepts too, to refuse the gets sent
		// to it rather than leave them unanswered.
		c.wg.Go(c.acceptLoop)
	}
	if cfg.Role != RoleConsumer && cfg.TTL > 0 {
		c.wg.Go(c.reapLoop)
	}
	eng.Ready()
	return c, nil
}

// Close stops the connector: Gets in flight and every later call fail with
// an error matching net.ErrClosed, stored values are dropped, and the
// engine is closed with all its memory, which ends every Buffer the
// connector handed out. It waits for the connector's goroutines. Idempotent.
func (c *Connector) Close() error {
	c.Stop()
	c.down.Store(true)
	return c.eng.Close()
}

// Stop is Close less closing the engine: Gets in flight and every later
// call fail with an error matching net.ErrClosed and stored values are
// dropped, but the pool stays mapped, so that memory handed out (a
// Buffer's Bytes) may still be read and written until Close. It waits for
// the connector's goroutines. Idempotent; Close after Stop closes the
// engine.
func (c *Connector) Stop() {
	c.stopOnce.Do(c.stop)
}

func (c *Connector) stop() {
	c.calls.Stop()
	c.mu.Lock()
	c.closed = true
	remotes := make([]*remote, 0, len(c.remote))
	for _, r := range c.remote {
		r.failAll(net.ErrClosed)
		remotes = append(remotes, r)
	}
	c.slots = map[string]*slot{}
	c.wait = map[string][]*waiter{}
	c.claims = map[claimKey]*claim{}
	c.mu.Unlock()
	c.syncAll(remotes)
	c.cancel()
	// The goroutines end with c.ctx, and may still touch the engine's
	// memory until they do (a control message copied into a registered
	// block, a value being written); so may senders holding a control
	// block (their sends end with c.ctx too). The engine, which unmaps that
	// memory, closes after them.
	c.wg.Wait()
	for range ctrlBlocks {
		<-c.ctrl.free
	}
}

// syncTimeout bounds the sync with each producer at Close.
const syncTimeout = time.Second

// syncAll syncs with every producer still connected, so that the releases
// this consumer sent reach them before its connections close: otherwise
// closing the engine drops what its transports have not sent yet, and a
// producer would count a value this consumer took as not taken.
func (c *Connector) syncAll(remotes []*remote) {
	var wg sync.WaitGroup
	for _, r := range remotes {
		select {
		case <-r.peer.Down():
			continue
		default:
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(c.ctx, syncTimeout)
			defer cancel()
			if _, err := c.call(ctx, r, nil, func(id uint32) []byte { return appendSync(nil, id) }, func(result) {}); err != nil {
				c.log.Debug("connector: sync with a producer at close failed", "peer", r.peer.String(), "err", err)
			}
		})
	}
	wg.Wait()
}
