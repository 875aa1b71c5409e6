package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the environment variable of every flag (docs/guide.md,
// "Commands").
const envPrefix = "SLUICE_"

// EnvName returns the environment variable that sets the flag named name:
// SLUICE_ and the name in upper snake case, e.g. --admin-listen is
// SLUICE_ADMIN_LISTEN.
func EnvName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// bindEnv sets every flag of cmd (its own and those it inherits) that was
// not given on the command line from its environment variable, when that
// variable is set and not empty: flags win over the environment, which wins
// over defaults. lookup is os.LookupEnv outside tests.
// Empty variables count as unset, so that `SLUICE_X= sluice ...` cannot
// turn a number or duration flag into an error. A value the flag does
// not accept is an error naming the variable.
func bindEnv(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := EnvName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := cmd.Flags().Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment %s=%q: %v", name, v, serr)
		}
	})
	return err
}
