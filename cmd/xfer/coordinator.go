package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/mooncake/mastersrv"
)

// coordinatorBanner starts the line coordinator prints to stdout once it
// listens; the address follows.
const coordinatorBanner = "xfer coordinator: listening on "

func newCoordinatorCmd(g *globals) *cobra.Command {
	var listen, tokenFile string
	var ttl time.Duration
	var protectReads bool
	cmd := &cobra.Command{
		Use:   "coordinator",
		Short: "Run a directory through which nodes find each other by node ID (HTTP)",
		Long: "coordinator serves the http directory backend: nodes register their entry\n" +
			"(addresses, transports, exports, RDMA endpoint) and look up others by node ID,\n" +
			"with --directory http://HOST:PORT. Entries expire when their node stops sending\n" +
			"heartbeats. It keeps entries in memory and is not highly available: for more\n" +
			"than a small cluster, use an etcd cluster (--directory etcd://HOST:2379/PREFIX).\n\n" +
			"  POST   /nodes/{id}/rdma/endpoint   register, or refresh (?ttl=10s&incarnation=X)\n" +
			"  GET    /nodes/{id}/rdma/endpoint   one entry\n" +
			"  GET    /nodes                      every live entry\n" +
			"  DELETE /nodes/{id}                 remove an entry (?incarnation=X: only that one's)\n\n" +
			"A live entry belongs to the incarnation that created it: another gets 409 and the\n" +
			"holder's addresses. The RDMA guide's format is taken too: a bare\n" +
			"{\"qpn\",\"lid\",\"gid\",\"psn\"} endpoint posted under a (numeric) ID, answered by GET.\n\n" +
			"  DELETE /nodes/{id}                 remove an entry\n\n" +
			"With --token-file, POST and DELETE need the file's token as a bearer token (nodes\n" +
			"read it with directory_token_file), and with --protect-reads the GETs too: anyone\n" +
			"who reaches a coordinator without a token can replace or remove any node's entry.\n\n" +
			"Once it listens it prints one line to stdout:\n\n  " + coordinatorBanner + "HOST:PORT",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listen == "" {
				return errors.New("coordinator needs an address to listen on: --listen HOST:PORT (or :0)")
			}
			if ttl < directory.MinTTL || ttl > directory.MaxTTL {
				return fmt.Errorf("--ttl %v: must be between %v and %v", ttl, directory.MinTTL, directory.MaxTTL)
			}
			ops, err := g.startOps(cmd.Flags())
			if err != nil {
				return err
			}
			defer ops.Close()
			o := directory.CoordinatorOptions{TTL: ttl, Logger: g.log, ProtectReads: protectReads}
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("--token-file: %w", err)
				}
				if o.Token = strings.TrimSpace(string(b)); len(o.Token) < xfer.MinSecretLen {
					return fmt.Errorf("--token-file %s: %d bytes, at least %d required: generate one with `xfer secret > %s`", tokenFile, len(o.Token), xfer.MinSecretLen, tokenFile)
				}
			} else if protectReads {
				return errors.New("--protect-reads needs a token: --token-file FILE (make one with: xfer secret > FILE)")
			}
			return runCoordinator(cmd.Context(), g, listen, o, ops)
		},
	}
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "`file` holding the token that writes need (make one with: xfer secret > FILE)")
	cmd.Flags().BoolVar(&protectReads, "protect-reads", false, "require the token of reads too")
	cmd.Flags().StringVar(&listen, "listen", "", "`address` to serve on, e.g. :7470 (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", directory.DefaultTTL, "how long an entry lives without a heartbeat, when its node asks for no TTL")
	addOpsFlags(cmd.Flags())
	return cmd
}

func runCoordinator(ctx context.Context, g *globals, listen string, o directory.CoordinatorOptions, ops *opsServer) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if reg := ops.Registerer(); reg != nil {
		refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_auth_failures_total",
			Help: "Callers refused for authentication, by plane (directory: the coordinator's token) and reason (no_proof, bad_proof).",
		}, []string{"plane", "reason"})
		if err := reg.Register(refusals); err != nil {
			return err
		}
		defer reg.Unregister(refusals)
		for _, r := range []string{xfer.ReasonNoProof, xfer.ReasonBadProof} {
			refusals.WithLabelValues(xfer.PlaneDirectory, r)
		}
		o.OnRefused = func(_, reason string, _ error) { refusals.WithLabelValues(xfer.PlaneDirectory, reason).Inc() }
	}
	coord := directory.NewCoordinator(o)
	srv := &http.Server{
		Handler:           coord,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          nil,
	}
	ops.setStatus(func() statusDoc {
		d := baseStatus()
		d.Command = "coordinator"
		n := coord.Refused()
		d.AuthFailures = &n
		return d
	})
	ops.setReady(true)
	defer ops.setReady(false)
	fmt.Fprintf(g.stdout, "%s%s\n", coordinatorBanner, l.Addr())
	if err := mastersrv.ServeHTTP(ctx, srv, l); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}
