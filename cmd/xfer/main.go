package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	// The first SIGINT or SIGTERM cancels the context, and commands shut
	// down cleanly; a second one kills the process (NotifyContext restores
	// the default handling once the context is done).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		var said *exitError
		if !errors.As(err, &said) {
			fmt.Fprintf(stderr, "xfer: %v\n", err)
		}
		return 1
	}
	return 0
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "xfer",
		Short: "Move bytes between processes and hosts with the xfer engine",
		Long: "xfer runs and measures the xfer transfer engine.\n\n" +
			"Configuration comes from a YAML file (--config, or $" + envConfigFile + ") with the keys\n" +
			"  " + fileKeys() + "\n" +
			"where the tcp and rdma keys may also be written as mappings:\n" +
			"  tcp: {conns: 5, poll_spin: 20us, congestion: auto}\n" +
			"  rdma: {device: rxe0, gid_index: auto}\n" +
			"(not both forms for one option). A transport section of the production layout,\n" +
			"  transport: {amst: {enable_rdma: true, rdma_device: mlx5_0, rdma_max_sge: 16, ...}}\n" +
			"is accepted as it is (docs/OPERATIONS.md maps each of its keys). The keys are\n" +
			"overridden by " + envPrefix + "<KEY> environment variables\n" +
			"(" + envPrefix + "MEMORY_MB, " + envPrefix + "RDMA_DEVICE, " + envPrefix + "CONNS or " + envPrefix + "TCP_CONNS, ...),\n" +
			"overridden by the flags given on the command line.",
		SilenceUsage:  true, // errors are not usage mistakes most of the time
		SilenceErrors: true, // run prints them, once
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			g.log, err = newLogger(g.stderr, g.logLevel, g.logFormat)
			return err
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	// --version prints what `xfer version` does; the template runs only
	// when the flag is given, so other commands do not load libibverbs.
	root.Version = "-"
	cobra.AddTemplateFunc("xferVersion", versionTemplate)
	root.SetVersionTemplate("{{xferVersion}}")
	pf := root.PersistentFlags()
	pf.StringVar(&g.configPath, "config", "", "YAML configuration `file` (default $"+envConfigFile+")")
	pf.StringVar(&g.logLevel, "log-level", defaultLogLevel, "log level: debug, info, warn or error (config key log_level)")
	pf.StringVar(&g.logFormat, "log-format", defaultLogFormat, "log format: text or json (config key log_format)")
	root.AddCommand(newServeCmd(g), newBenchCmd(g), newDevicesCmd(g), newDoctorCmd(g), newKVCmd(g), newVersionCmd(g), newCoordinatorCmd(g), newPagesCmd(g), newTransferCmd(g), newStatusCmd(g), newSecretCmd(g), newMooncakeCmd(g))
	rejectUnknownSubcommands(root)
	return root
}

// rejectUnknownSubcommands makes every command that only groups others
// (xfer kv) fail on an unknown subcommand, with suggestions, as the root
// does: cobra would print the help and exit 0. Without arguments they print
// their help.
func rejectUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		rejectUnknownSubcommands(sub)
	}
	if cmd == cmd.Root() || !cmd.HasSubCommands() || cmd.Run != nil || cmd.RunE != nil {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
		}
		return fmt.Errorf("%s\n\nRun '%s --help' for usage", msg, cmd.CommandPath())
	}
}
