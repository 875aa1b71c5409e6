package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/rulestore"
)

// restoreTimeout bounds a whole restore: connecting, migrating and
// writing every rule in one transaction.
const restoreTimeout = 5 * time.Minute

func newRulesRestoreCmd() *cobra.Command {
	var (
		snapshot string
		dbURL    string
		force    bool
	)
	cmd := &cobra.Command{
		Use:   "restore --from-snapshot FILE --rules postgres://...",
		Short: "Put a snapshot's rules into a rules database that was replaced or went back, so that the fleet takes it again",
		Long: `Put the rules of a --rules-snapshot file into the PostgreSQL rules database,
directly (not through an admin API), so that a fleet that refuses the
database takes it again.

Instances refuse a database that is not the one whose rules they serve (it
was dropped and created again, say) or that went back to a lower revision
(restored from an older backup): they keep serving their rules, /readyz says
"refused": true and why, and writes get 503. Run this with the snapshot of
the instance with the highest revision (/readyz "revision"). In one
transaction it writes the snapshot's rules, clients and default plan as the
next revision after both the database's and the snapshot's, gives the
database a new identity, and records that it continues the snapshot's
database; every instance that served that database at the snapshot's
revision or before then takes the restored rules.

It refuses, unless --force, a database with changes of its own (a revision
above 0) that is not the snapshot's, the snapshot's database (or one
restored from it) when that is not older than the snapshot, and a snapshot
that names no database.

--rules is also read from SLUICE_RULES, as sluice serve reads it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if snapshot == "" {
				return errors.New("rules restore: --from-snapshot FILE is required: the --rules-snapshot file of the instance with the highest revision (see its /readyz)")
			}
			if !rulestore.IsPostgresURL(dbURL) {
				return fmt.Errorf("rules restore: --rules (or SLUICE_RULES) must name the rules database, postgres://user@host:5432/database, got %q", dbURL)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), restoreTimeout)
			defer cancel()
			res, err := rulestore.RestoreSnapshot(ctx, rulestore.RestoreConfig{URL: dbURL, Snapshot: snapshot, Force: force, Actor: restoreActor()})
			if err != nil {
				return err
			}
			from := res.From
			if from == "" {
				from = "unknown"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored %d rules and %d clients from %s (database %s, revision %d)\n"+
				"into %s (was database %s, revision %d) as revision %d; its identity is now %s.\n"+
				"Every instance that served database %s at revision %d or before takes these rules at its next refresh.\n",
				res.Rules, res.Clients, snapshot, from, res.FromRevision,
				res.Location, res.Replaced, res.ReplacedRevision, res.Revision, res.Database,
				from, res.FromRevision)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&snapshot, "from-snapshot", "", "the --rules-snapshot file to restore (of the instance with the highest revision)")
	fl.StringVar(&dbURL, "rules", "", "the rules database, postgres://user@host:5432/database (default $SLUICE_RULES)")
	fl.BoolVar(&force, "force", false, "restore into a database with changes of its own, over a database not older than the snapshot, or from a snapshot that names no database")
	return cmd
}

// restoreActor is who a restore is recorded as in the history:
// "sluice rules restore (user@host)".
func restoreActor() string {
	who := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		who += "@" + h
	}
	return "sluice rules restore (" + who + ")"
}
