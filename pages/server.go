package pages

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/xferio/xfer"
)

// Page sizes.
const (
	PageSize4K = 4 << 10
	PageSize2M = 2 << 20
)

// ExportName is the name a server exports its address space under.
const ExportName = "pages"

// pageSizeExport is the second name of the address space: "pages/4096".
func pageSizeExport(ps int) string { return ExportName + "/" + strconv.Itoa(ps) }

// ServerConfig configures a Server.
type ServerConfig struct {
	// Engine configures the server's engine; Listen is required. Its pool
	// (MemoryMB) is not used for pages: the address space is a region of
	// its own. Clients are held until NewServer has exported the address
	// space; with HoldPeers set, until the caller calls Engine().Ready too
	// (after filling the pages, say).
	Engine xfer.Config
	// Size is the size of the address space in bytes, a multiple of
	// PageSize.
	Size int64
	// PageSize is 4096 (the default) or 2 MiB.
	PageSize int
	// Writable lets clients WRITE pages back (Client.WritePage). Zero:
	// the address space is exported read-only, and a client's WRITE is
	// refused (ErrRemoteAccess) by the transport below the client's
	// engine: the NIC's memory registration on rdma, the read-only
	// mapping on shm, the server's engine on tcp.
	Writable bool
}

// Server serves a guest-physical address space to clients' READs (and
// WRITEs, when it is writable).
type Server struct {
	eng      *xfer.Engine
	region   *xfer.Region
	pageSize int
	cancel   context.CancelFunc
	done     chan struct{}
}

func checkPageSize(n int) (int, error) {
	switch n {
	case 0:
		return PageSize4K, nil
	case PageSize4K, PageSize2M:
		return n, nil
	}
	return 0, fmt.Errorf("pages: page size %d: want %d (4 KiB) or %d (2 MiB)", n, PageSize4K, PageSize2M)
}

// NewServer maps and registers the address space and starts serving it.
func NewServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	ps, err := checkPageSize(cfg.PageSize)
	if err != nil {
		return nil, err
	}
	if cfg.Size <= 0 || cfg.Size%int64(ps) != 0 {
		return nil, fmt.Errorf("pages: size %d: want a positive multiple of the page size (%d)", cfg.Size, ps)
	}
	if int64(int(cfg.Size)) != cfg.Size {
		return nil, fmt.Errorf("pages: size %d: too large for this platform", cfg.Size)
	}
	if cfg.Engine.Listen == "" {
		return nil, errors.New("pages: a server must listen: set Engine.Listen")
	}
	// Clients are held until the address space is exported: by NewServer
	// itself, or by the caller (Engine().Ready) when it asked to hold them.
	hold := cfg.Engine.HoldPeers
	ecfg := cfg.Engine
	ecfg.HoldPeers = true
	eng, err := xfer.Open(ctx, ecfg)
	if err != nil {
		return nil, fmt.Errorf("pages: %w", err)
	}
	access := xfer.AccessRead
	if cfg.Writable {
		access = xfer.AccessReadWrite
	}
	r, err := eng.NewRegion(int(cfg.Size), access)
	if err != nil {
		eng.Close()
		return nil, fmt.Errorf("pages: address space of %d bytes: %w", cfg.Size, err)
	}
	eng.Export(ExportName, r)
	// The same region under a name that carries the page size, so that a
	// client with another page size is refused rather than misled.
	eng.Export(pageSizeExport(ps), r)
	actx, cancel := context.WithCancel(context.Background())
	s := &Server{eng: eng, region: r, pageSize: ps, cancel: cancel, done: make(chan struct{})}
	// Clients only READ (and WRITE): accept their connections and let the
	// engine serve them.
	go func() {
		defer close(s.done)
		for {
			if _, err := eng.Accept(actx); err != nil {
				return
			}
		}
	}()
	if !hold {
		eng.Ready()
	}
	return s, nil
}

// Addr is the address clients dial.
func (s *Server) Addr() string { return s.eng.Addr() }

// Memory is the address space: byte i is GPA base+i on a client that maps
// this server at base.
func (s *Server) Memory() []byte { return s.region.Bytes() }

// PageSize is the server's page size.
func (s *Server) PageSize() int { return s.pageSize }

// Engine is the server's engine.
func (s *Server) Engine() *xfer.Engine { return s.eng }

// Close stops serving; clients' fetches fail. Idempotent.
func (s *Server) Close() error {
	s.cancel()
	err := s.eng.Close()
	<-s.done
	return err
}
