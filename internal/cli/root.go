// Package cli holds the sluice command: its subcommands, their flags and
// the environment variables that stand in for them. cmd/sluice only calls
// Execute.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/client"
)

// Execute runs the sluice command with os.Args and returns the process exit
// code: 0 on success, 1 on any error (printed to stderr).
//
// Run under the name ratelimit (the image's /bin/ratelimit, a link to
// sluice), it is `sluice serve`: an envoyproxy/ratelimit deployment whose
// command is /bin/ratelimit runs sluice when only its image is replaced.
func Execute() int {
	return run(context.Background(), NewRoot(), commandLine(os.Args), os.Stderr)
}

// commandLine returns the arguments sluice runs with, given the process's
// argv: argv[1:], after "serve" when argv[0] is named ratelimit.
func commandLine(argv []string) []string {
	if len(argv) > 0 && filepath.Base(argv[0]) == "ratelimit" {
		return append([]string{"serve"}, argv[1:]...)
	}
	return argv[1:]
}

// run executes root with args and renders an error, returning the exit code.
func run(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ae *client.Error
	if errors.Is(err, errFindings) {
		return 1 // printed already
	}
	if errors.As(err, &ae) {
		// The server's own words first, then where they came from.
		code := ""
		if ae.Code != "" {
			code = " " + ae.Code
		}
		fmt.Fprintf(stderr, "sluice: %s (HTTP %d%s)\n", ae.Message, ae.Status, code)
	} else {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
	}
	return 1
}

// NewRoot returns the sluice command with all its subcommands. Every flag
// of every subcommand also reads SLUICE_<FLAG> (see EnvName); a flag given
// on the command line wins.
func NewRoot() *cobra.Command {
	cobra.AddTemplateFunc("sluiceBuildInfo", func() string {
		var b strings.Builder
		readBuildInfo().write(&b)
		return b.String()
	})
	root := &cobra.Command{
		Use:   "sluice",
		Short: "sluice is a distributed rate limiter for HTTP APIs",
		Long: `sluice is a distributed rate limiter for HTTP APIs.

Every flag can also be set with an environment variable SLUICE_<FLAG>, the
flag's name in upper snake case: --admin-listen is SLUICE_ADMIN_LISTEN,
--admin-token is SLUICE_ADMIN_TOKEN. A flag on the command line wins over
the environment; an empty variable is ignored.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Runs before every subcommand (cobra runs the nearest
		// PersistentPreRunE only: subcommands must not define their own).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			warnSecretArgs(cmd, cmd.ErrOrStderr())
			return bindEnv(cmd, os.LookupEnv)
		},
	}
	// --version prints what `sluice version` prints.
	root.Version = version
	root.SetVersionTemplate(`{{sluiceBuildInfo}}`)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())
	})
	root.AddCommand(
		newServeCmd(),
		newGatewayCmd(),
		newRulesCmd(),
		newBenchCmd(),
		newVersionCmd(),
	)
	return root
}
