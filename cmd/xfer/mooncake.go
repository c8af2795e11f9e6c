package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer/mooncake"
	"github.com/xferio/xfer/mooncake/mastersrv"
)

// metadataBanner starts the line `xfer mooncake metadata-server` prints
// to stdout once it listens; the address follows.
const metadataBanner = "xfer mooncake metadata-server: listening on "

func newMooncakeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mooncake",
		Short: "Mooncake's services on xfer (metadata-server, master)",
		Long: "Services that Mooncake's TransferEngine (xfer.mooncake.engine, see docs/MOONCAKE.md)\n" +
			"expects beside it, and the master of Mooncake's distributed store.",
	}
	cmd.AddCommand(newMetadataServerCmd(g), newMooncakeMasterCmd(g))
	return cmd
}

func newMetadataServerCmd(g *globals) *cobra.Command {
	var host string
	var port int
	cmd := &cobra.Command{
		Use:   "metadata-server",
		Short: "Run Mooncake's HTTP metadata server until SIGINT or SIGTERM",
		Long: "metadata-server serves Mooncake's HTTP metadata protocol, as Mooncake's\n" +
			"mooncake_http_metadata_server does: engines given\n" +
			"metadata_server=http://HOST:PORT/metadata (or MC_METADATA_SERVER) publish where their\n" +
			"segment listens under mooncake/rpc_meta/NAME and find each other's there.\n\n" +
			"  GET    /metadata?key=KEY   200 and the value, or 404 \"metadata not found\"\n" +
			"  PUT    /metadata?key=KEY   200 \"metadata updated\"; a key holding rpc_meta keeps its first\n" +
			"                             value until deleted (400 \"Duplicate rpc_meta key not allowed\")\n" +
			"  DELETE /metadata?key=KEY   200 \"metadata deleted\", or 404 \"metadata not found\"\n\n" +
			"A request without a key is 400, another method 405. Keys live in memory only, at most\n" +
			"MC_METADATA_MAX_KEYS (65536) of them and MC_METADATA_MAX_TOTAL_BYTES (1 GiB) in all\n" +
			"(507 past either). With MC_METADATA_HTTP_TOKEN set, every request must carry it\n" +
			"(Authorization: Bearer TOKEN; 401 otherwise), and engines send it from the same variable:\n" +
			"without it, anyone who reaches the port can rewrite where every segment is.\n\n" +
			"Once it listens it prints one line to stdout:\n\n  " + metadataBanner + "HOST:PORT",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 0 || port > 65535 {
				return fmt.Errorf("--port %d: want 0 to 65535 (0: any free port)", port)
			}
			o, err := metadataServerOptions(g)
			if err != nil {
				return err
			}
			return runMetadataServer(cmd.Context(), g, net.JoinHostPort(host, strconv.Itoa(port)), o)
		},
	}
	cmd.Flags().IntVar(&port, "port", 8080, "`port` to listen on (0: any free port)")
	cmd.Flags().StringVar(&host, "host", "0.0.0.0", "`address` to bind to")
	return cmd
}

// metadataServerOptions reads the metadata server's options from the
// environment: MC_METADATA_HTTP_TOKEN, MC_METADATA_MAX_KEYS and
// MC_METADATA_MAX_TOTAL_BYTES, as Mooncake's server does.
func metadataServerOptions(g *globals) (mooncake.ServerOptions, error) {
	o := mooncake.ServerOptions{Token: os.Getenv("MC_METADATA_HTTP_TOKEN"), Logger: g.log}
	var err error
	if o.MaxKeys, err = envInt("MC_METADATA_MAX_KEYS"); err != nil {
		return o, err
	}
	n, err := envInt("MC_METADATA_MAX_TOTAL_BYTES")
	if err != nil {
		return o, err
	}
	o.MaxTotalBytes = int64(n)
	return o, nil
}

// envInt reads a positive integer from the environment variable name; 0
// when it is unset.
func envInt(name string) (int, error) {
	s := os.Getenv(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", name, s)
	}
	return n, nil
}

func runMetadataServer(ctx context.Context, g *globals, addr string, o mooncake.ServerOptions) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mooncake metadata-server: %w", err)
	}
	if o.Token == "" {
		if h, _, _ := net.SplitHostPort(addr); !net.ParseIP(h).IsLoopback() && h != "localhost" {
			g.log.Warn("mooncake metadata-server: no MC_METADATA_HTTP_TOKEN: anyone who reaches this port can read and rewrite where every segment is", "listen", l.Addr().String())
		}
	}
	srv := &http.Server{Handler: mooncake.NewServer(o), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(g.stdout, "%s%s\n", metadataBanner, l.Addr())
	if err := mastersrv.ServeHTTP(ctx, srv, l); err != nil {
		return fmt.Errorf("mooncake metadata-server: %w", err)
	}
	return nil
}
