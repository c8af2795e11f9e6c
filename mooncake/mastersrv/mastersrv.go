// Package mastersrv runs Mooncake's store master as one server: the
// master's gRPC service (mooncake/master), its Prometheus metrics on HTTP,
// optionally Mooncake's HTTP metadata server (mooncake), leader election
// in etcd, and the master's calls on xfer's data plane
// (mooncake/masterdata) over an engine of its own. `xfer mooncake master`
// parses its flags into [Options] and calls [Run]; tests and programs can
// run a master the same way.
package mastersrv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mooncake"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/masterdata"
)

// Options say what Run serves and where.
type Options struct {
	// Master is the service's options.
	Master master.Options
	// Addr is the gRPC address to listen on (host:port; port 0: any).
	Addr string
	// GRPC are the gRPC server's options.
	GRPC []grpc.ServerOption
	// HA, when set, makes the master a candidate for leader in etcd; its
	// Addr is set to the address clients dial (Advertised).
	HA *master.HAOptions
	// Secret is the shared secret the master's calls prove ("": none).
	Secret string
	// MetricsAddr is the address of the Prometheus metrics' HTTP server.
	MetricsAddr string
	// Metadata, when set, also serves Mooncake's HTTP metadata server at
	// MetadataAddr with these options.
	Metadata     *mooncake.ServerOptions
	MetadataAddr string
	// DataPort is the port of the data plane's engine (0: any), on the
	// gRPC address's host; below 0, no data plane.
	DataPort int
	// Report logs a summary of the master's state every 10 seconds.
	Report bool
	Log    *slog.Logger
	// Listening, when set, is called once every server listens.
	Listening func(Listening)
}

// Listening is where Run's servers listen: "" for one it does not run.
type Listening struct {
	GRPC, Metrics, Data, Metadata string
	// Candidate is the address the master stands in etcd with, under HA.
	Candidate string
}

// Run serves the master until ctx ends or a server fails, then stops every
// server: the gRPC server gracefully (within 5 s), then, under HA, the
// leader writes its last changes and resigns, so that a standby takes
// over at once. Its errors start with "mooncake master: ".
func Run(ctx context.Context, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("mooncake master: %w", err)
	}
	defer l.Close()
	ml, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		return fmt.Errorf("mooncake master: metrics: %w", err)
	}
	defer ml.Close()
	var hl net.Listener
	if o.Metadata != nil {
		if hl, err = net.Listen("tcp", o.MetadataAddr); err != nil {
			return fmt.Errorf("mooncake master: metadata server: %w", err)
		}
		defer hl.Close()
	}
	if o.Secret == "" {
		if h, _, _ := net.SplitHostPort(o.Addr); !net.ParseIP(h).IsLoopback() && h != "localhost" {
			log.Warn("mooncake master: no XFER_SECRET or XFER_SECRET_FILE: anyone who reaches this port can mount segments and remove objects", "listen", l.Addr().String())
		}
	}
	at := Listening{GRPC: l.Addr().String(), Metrics: ml.Addr().String()}

	var data *xfer.Engine
	if o.DataPort >= 0 {
		host, _, _ := net.SplitHostPort(o.Addr)
		if data, err = xfer.Open(ctx, xfer.Config{Listen: net.JoinHostPort(host, strconv.Itoa(o.DataPort)), MemoryMB: 1,
			Secret: o.Secret, Logger: log, HoldPeers: true}); err != nil {
			return fmt.Errorf("mooncake master: the data plane (--xfer_data_port): %w", err)
		}
		defer data.Close()
		at.Data = data.Addr()
		_, port, _ := net.SplitHostPort(data.Addr())
		o.Master.DataPort, _ = strconv.Atoi(port)
	}
	s := master.New(o.Master)
	defer s.Close()
	if o.HA != nil {
		ha := *o.HA
		ha.Addr = Advertised(l.Addr())
		at.Candidate = ha.Addr
		h, err := master.StartHA(ctx, s, ha)
		if err != nil {
			return err
		}
		// After the gRPC server stopped: the leader writes its last
		// changes and resigns, so that a standby takes over at once.
		defer h.Close()
	}
	gs := s.NewGRPCServer(o.Secret, o.GRPC...)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	servers := []*http.Server{{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	listeners := []net.Listener{ml}
	if hl != nil {
		servers = append(servers, &http.Server{Handler: mooncake.NewServer(*o.Metadata), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, hl)
		at.Metadata = "http://" + hl.Addr().String() + mooncake.MetadataPath
	}
	if o.Listening != nil {
		o.Listening(at)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(servers)+1)
	go func() { errc <- gs.Serve(l) }()
	if data != nil {
		go masterdata.Serve(ctx, data, s, log)
		data.Ready()
	}
	for i, srv := range servers {
		go func() { errc <- ServeHTTP(ctx, srv, listeners[i]) }()
	}
	if o.Report {
		go report(ctx, log, s)
	}
	pending := len(servers) + 1
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
		pending--
	}
	cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
		<-stopped
	}
	// Serve returns nil once the gRPC server stopped, ServeHTTP once its
	// server shut down.
	for range pending {
		if err := <-errc; first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("mooncake master: %w", first)
	}
	return nil
}

// ServeHTTP serves srv on l until ctx ends, then shuts it down, giving
// the requests under way 5 s: nil then, or why serving stopped before.
func ServeHTTP(ctx context.Context, srv *http.Server, l net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// report logs a summary of the master's state every 10 seconds, as
// mooncake_master's --enable_metric_reporting does.
func report(ctx context.Context, log *slog.Logger, s *master.Service) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := s.Stats()
		log.Info("mooncake master: state", "objects", st.Objects, "used_bytes", st.UsedBytes, "capacity_bytes", st.Capacity,
			"segments", st.Segments, "clients", st.Clients, "evictions", st.Evictions, "gets", st.Gets, "get_hits", st.GetHits)
	}
}

// Advertised is the address clients dial to reach a master listening at
// addr: addr itself, but a wildcard host is replaced by the first
// non-loopback IPv4 address of the machine (loopback if none).
func Advertised(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return addr.String()
	}
	host = "127.0.0.1"
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				host = n.IP.String()
				break
			}
		}
	}
	return net.JoinHostPort(host, port)
}

// InterfaceIPv4 returns the first IPv4 address of the network interface
// name.
func InterfaceIPv4(name string) (string, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return "", err
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("the interface has no IPv4 address")
}
