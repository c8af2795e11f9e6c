package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/spf13/pflag"

	"github.com/xferio/xfer/config"
)

// The operations endpoint: the commands that run (serve, kv serve, pages
// serve, coordinator, bench) serve Prometheus metrics, the status API and
// health checks on --metrics-listen (config key metrics_listen,
// XFER_METRICS_LISTEN). docs/OPERATIONS.md describes it.

// Paths of the operations endpoint; the status API's is statusPath
// (status.go).
const (
	metricsPath = "/metrics"
	healthzPath = "/healthz"
	readyzPath  = "/readyz"
	pprofPath   = "/debug/pprof/"
)

// opsBanner starts the line a command prints to stderr once its
// operations endpoint listens; the URL follows.
const opsBanner = "xfer: metrics and status on http://"

// opsBannerWeb is opsBanner with a web configuration file, which says
// whether the endpoint speaks TLS.
const opsBannerWeb = "xfer: metrics and status, with TLS and authentication as the web configuration file says, on "

// addOpsFlags adds --metrics-listen and --pprof to a command that serves.
func addOpsFlags(fs *pflag.FlagSet) {
	fs.String("metrics-listen", "", "`address` to serve "+metricsPath+", "+statusPath+", "+healthzPath+" and "+readyzPath+" on, e.g. :9464 (config key "+config.KeyMetricsListen+"; default: none)")
	fs.Bool("pprof", false, "also serve Go's profiler under "+pprofPath+" on --metrics-listen (off unless asked: it shows stacks)")
	fs.String("web-config-file", "", "TLS and basic authentication of --metrics-listen: a web configuration `file` as Prometheus exporters take (config key "+config.KeyWebConfigFile+")")
}

// metricsListen is the operations endpoint's address: --metrics-listen,
// else XFER_METRICS_LISTEN, else the config file's metrics_listen; "" for
// none.
func (g *globals) metricsListen(fs *pflag.FlagSet) (addr, webConfig string, err error) {
	doc, err := loadSettings(g.configFile(), os.LookupEnv, fs)
	return doc.MetricsListen, doc.WebConfigFile, err
}

// opsServer serves the operations endpoint. A nil *opsServer (no
// --metrics-listen) does nothing, and its Registerer is nil: the engines
// then keep no metrics at all.
type opsServer struct {
	reg    *prometheus.Registry
	srv    *http.Server
	ln     net.Listener
	done   chan error
	ready  atomic.Bool
	mu     sync.Mutex
	status func() statusDoc
}

// startOps starts the operations endpoint when the command has an address
// for it. Set its status source with setStatus and mark it ready with
// setReady once the command is ready: everything its peers may ask for is
// in place (docs/OPERATIONS.md, Readiness).
func (g *globals) startOps(fs *pflag.FlagSet) (*opsServer, error) {
	addr, webConfig, err := g.metricsListen(fs)
	if err != nil || addr == "" {
		return nil, err
	}
	if webConfig != "" {
		if err := web.Validate(webConfig); err != nil {
			return nil, fmt.Errorf("--web-config-file %s: %w", webConfig, err)
		}
	}
	withPprof, _ := fs.GetBool("pprof")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	o := &opsServer{reg: prometheus.NewRegistry(), ln: ln, done: make(chan error, 1)}
	o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET "+metricsPath, promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET "+statusPath, o.serveStatus)
	mux.HandleFunc("GET "+healthzPath, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET "+readyzPath, func(w http.ResponseWriter, _ *http.Request) {
		if !o.ready.Load() {
			http.Error(w, "not ready: starting or shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if withPprof {
		mux.HandleFunc(pprofPath, pprof.Index)
		mux.HandleFunc(pprofPath+"cmdline", redactedCmdline)
		mux.HandleFunc(pprofPath+"profile", pprof.Profile)
		mux.HandleFunc(pprofPath+"symbol", pprof.Symbol)
		mux.HandleFunc(pprofPath+"trace", pprof.Trace)
	}
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if webConfig != "" {
		// TLS and basic authentication as the web configuration says
		// (exporter-toolkit reads it again on each connection).
		flags := &web.FlagConfig{WebConfigFile: &webConfig}
		go func() { o.done <- web.Serve(ln, o.srv, flags, g.log) }()
		fmt.Fprintf(g.stderr, "%s%s\n", opsBannerWeb, ln.Addr())
	} else {
		go func() { o.done <- o.srv.Serve(ln) }()
		fmt.Fprintf(g.stderr, "%s%s\n", opsBanner, ln.Addr())
	}
	g.log.Info("operations endpoint", "addr", ln.Addr().String(), "pprof", withPprof, "web_config_file", webConfig)
	return o, nil
}

// redactedCmdline is pprof's cmdline with the values of the flags that
// carry secrets replaced.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs replaces the values of --secret (and any flag named *secret*,
// *token* or *password*) in args.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	redactNext := false
	for i, a := range args {
		switch {
		case redactNext:
			out[i], redactNext = "REDACTED", false
			continue
		case strings.HasPrefix(a, "-") && isSecretFlag(a):
			if name, _, ok := strings.Cut(a, "="); ok {
				out[i] = name + "=REDACTED"
				continue
			}
			redactNext = !strings.HasSuffix(a, "-file")
		}
		out[i] = a
	}
	return out
}

func isSecretFlag(a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	if strings.HasSuffix(name, "-file") {
		return false
	}
	for _, w := range []string{"secret", "token", "password"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// Registerer is where the command's engines and services register their
// metrics: nil without an operations endpoint.
func (o *opsServer) Registerer() prometheus.Registerer {
	if o == nil {
		return nil
	}
	return o.reg
}

// setStatus sets what the status API reports.
func (o *opsServer) setStatus(f func() statusDoc) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.status = f
	o.mu.Unlock()
}

// setReady makes /readyz answer 200 (true) or 503 (false).
func (o *opsServer) setReady(ready bool) {
	if o != nil {
		o.ready.Store(ready)
	}
}

func (o *opsServer) serveStatus(w http.ResponseWriter, _ *http.Request) {
	o.mu.Lock()
	f := o.status
	o.mu.Unlock()
	doc := baseStatus()
	if f != nil {
		doc = f()
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(doc)
}

// Close stops the endpoint.
func (o *opsServer) Close() error {
	if o == nil {
		return nil
	}
	o.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := o.srv.Shutdown(ctx)
	if serr := <-o.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
