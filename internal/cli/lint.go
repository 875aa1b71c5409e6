package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/rulecheck"
	"github.com/sluicehq/sluice/rules"
)

// errFindings makes `sluice rules lint` exit 1 after printing its
// findings; run prints nothing more for it.
var errFindings = errors.New("rules lint: findings")

func newRulesLintCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lint FILE",
		Short: "Check a rules file for rule sets that probably do not mean what they say (no admin API)",
		Long: `Check a rules file (- for standard input) as sluice loads it, then for
what a valid rule set probably does not mean:

  - a kind of caller (signed in, with only an API key, anonymous) that no
    rule limits on some plan: a plan's rules keyed by user leave its
    callers with only an API key unlimited;
  - a rule keyed by ip beside rules that limit signed-in callers by user or
    key: it counts them too, so everyone behind one address shares its
    bucket (by: client keys anonymous callers by address, the others by
    user or key);
  - a leaky_bucket written with burst: 0, which means the default burst of
    1 call on top of the conforming one, not none.

Each finding is printed with its line. Exit status 0: nothing found; 1: a
finding, or a file that does not load. sluice also logs these findings
at WARN when it loads a rules file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			var b []byte
			var err error
			if name == "-" {
				b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
				name = "standard input"
			} else {
				b, err = os.ReadFile(name)
			}
			if err != nil {
				return fmt.Errorf("rules lint: %w", err)
			}
			if _, err := rules.ParseRulesFile(b); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fs, err := rulecheck.Lint(b)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			w := cmd.OutOrStdout()
			for _, f := range fs {
				fmt.Fprintf(w, "%s: %s\n", name, f)
			}
			if len(fs) > 0 {
				fmt.Fprintf(w, "%d finding(s)\n", len(fs))
				return errFindings
			}
			fmt.Fprintf(w, "%s: no findings\n", name)
			return nil
		},
	}
}
