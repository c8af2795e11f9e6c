package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
)

func newSecretCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "secret",
		Short: "Print a new shared secret for secret_file",
		Long: "secret prints a new shared secret: 32 random bytes, base64url encoded. Every\n" +
			"engine, KV server and client of a cluster must have the same one. Keep it in a\n" +
			"file that only the service's user can read, and name it with secret_file:\n" +
			"  umask 077; xfer secret > /etc/xfer/secret\n" +
			"  xfer serve --secret-file /etc/xfer/secret\n" +
			"A secret on the command line (--secret) shows in ps; one shorter than 16 bytes\n" +
			"is refused.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := xfer.GenerateSecret()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(g.stdout, s)
			return err
		},
	}
}
