package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/rules"
)

// adminFlags are the flags every `sluice rules` subcommand shares.
type adminFlags struct {
	url        string
	token      string
	timeout    time.Duration
	ca         string // --admin-ca
	clientCert string // --admin-client-cert
	clientKey  string // --admin-client-key
}

// client returns an admin API client for the flags. An --admin without a
// scheme ("127.0.0.1:9090") is taken as http. A --admin-token that is not
// one token (blank, a list, a space inside) is an error naming the flag.
func (f *adminFlags) client() (*adminclient.Client, error) {
	if f.token != "" {
		if err := admin.ParseTokens(f.token).Err(); err != nil || strings.Contains(f.token, ",") {
			return nil, fmt.Errorf("--admin-token (%s): want one of the tokens of sluice serve --admin-token, e.g. \"alice:Zx81…\" (not blank, no list, no spaces inside)", EnvName("admin-token"))
		}
	}
	u := f.url
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	tc, err := clientTLS(f.ca, f.clientCert, f.clientKey, "--admin-ca", "--admin-client-cert", "--admin-client-key")
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: f.timeout}
	if tc != nil {
		if strings.HasPrefix(u, "http://") {
			return nil, fmt.Errorf("--admin %s: TLS flags given, want an https:// URL", f.url)
		}
		hc.Transport = &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}
	}
	return adminclient.New(u, client.WithToken(strings.TrimSpace(f.token)), client.WithHTTPClient(hc)), nil
}

// explain adds to an error of the admin API what to do about it: a 401
// names where the token comes from, a 404 of a server that is not the
// admin API and a refused connection name --admin's right value.
func (f *adminFlags) explain(err error) error {
	if err == nil {
		return nil
	}
	base := f.url
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	const where = "--admin (SLUICE_ADMIN) is the address of sluice serve's --admin-listen, default http://127.0.0.1:9090"
	var ae *client.Error
	if errors.As(err, &ae) {
		e := *ae
		switch {
		case e.Status == http.StatusUnauthorized && f.token == "":
			e.Message += "; no token was sent: set SLUICE_ADMIN_TOKEN (or --admin-token) to one of the server's --admin-token tokens"
		case e.Status == http.StatusUnauthorized:
			e.Message += "; the token of --admin-token (SLUICE_ADMIN_TOKEN) is not one of the server's --admin-token tokens"
		case e.Status == http.StatusNotFound && e.Code == "":
			e.Message = fmt.Sprintf("%s is not the admin API (it answered %q): %s", base, e.Message, where)
		default:
			return err
		}
		return &e
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("nothing answers at %s: is sluice running? %s (%w)", base, where, err)
	}
	return err
}

func newRulesCmd() *cobra.Command {
	f := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "List, get, apply and delete rate-limit rules through the admin API",
		Long: `Operate on the rules of a running sluice through its admin API.

  sluice rules list                    the rules in force, as a table
  sluice rules get ID                  one rule, as YAML
  sluice rules apply -f rules.yaml     make the rules what the file says
  sluice rules apply -f rules.yaml --dry-run
  sluice rules delete ID
  sluice rules explain --user U --endpoint "GET /path"   a call's rules, buckets and decision, taking nothing
  sluice rules import DIR|FILE         convert envoyproxy/ratelimit's configuration (no admin API)
  sluice rules lint FILE               check a rules file for limits it probably misses (no admin API)

--admin and --admin-token are also read from SLUICE_ADMIN and
SLUICE_ADMIN_TOKEN. For an admin API served with TLS, give an https://
--admin and, unless its certificate is signed by a CA the system trusts,
--admin-ca; for mutual TLS, --admin-client-cert and --admin-client-key.

  sluice rules restore --from-snapshot FILE --rules postgres://...

puts a --rules-snapshot file into a replaced rules database, directly.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.url, "admin", "http://127.0.0.1:9090", "admin API base URL")
	pf.StringVar(&f.token, "admin-token", "", "bearer token of the admin API: one of sluice serve --admin-token's, e.g. \"alice:s3cret\" (prefer SLUICE_ADMIN_TOKEN)")
	pf.DurationVar(&f.timeout, "timeout", 10*time.Second, "timeout of each admin API call")
	pf.StringVar(&f.ca, "admin-ca", "", "PEM CA certificate(s) the admin API's TLS certificate is checked against (default: the system's)")
	pf.StringVar(&f.clientCert, "admin-client-cert", "", "PEM client certificate for an admin API with mutual TLS (--admin-tls-client-ca)")
	pf.StringVar(&f.clientKey, "admin-client-key", "", "PEM private key of --admin-client-cert")
	cmd.AddCommand(newRulesListCmd(f), newRulesGetCmd(f), newRulesApplyCmd(f), newRulesDeleteCmd(f), newRulesExplainCmd(f), newRulesRestoreCmd(), newRulesImportCmd(), newRulesLintCmd())
	// Without RunE cobra prints the help and exits 0 on any verb it does
	// not know: a typo would look like success.
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownVerb(cmd, args[0])
	}
	return cmd
}

// unknownVerb is the error of `sluice rules <verb>` for a verb it does not
// have: the closest ones, and the list.
func unknownVerb(cmd *cobra.Command, verb string) error {
	verbs := "list, get, apply, delete, explain, restore, import, lint"
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	msg := fmt.Sprintf("unknown command %q for %q", verb, cmd.CommandPath())
	if s := cmd.SuggestionsFor(verb); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return fmt.Errorf("%s (verbs: %s; see '%s --help')", msg, verbs, cmd.CommandPath())
}

// oneID is the Args of subcommands that take exactly one rule id.
func oneID(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one rule id, got %d arguments (see '%s --help')", len(args), cmd.CommandPath())
	}
	return nil
}

// outputFlag adds --output/-o with the given formats, the first the default.
func outputFlag(cmd *cobra.Command, dst *string, formats ...string) {
	cmd.Flags().StringVarP(dst, "output", "o", formats[0], "output format: "+strings.Join(formats, ", "))
}

func badOutput(o string, formats ...string) error {
	return fmt.Errorf("--output %q: want %s", o, strings.Join(formats, ", "))
}

func newRulesListCmd(f *adminFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:        "list",
		SuggestFor: []string{"ls", "show-all"},
		Short:      "List the rules in force, with the revision",
		Args:       cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			set, err := c.ListRules(cmd.Context())
			if err != nil {
				return f.explain(err)
			}
			w := cmd.OutOrStdout()
			switch output {
			case "table":
				return writeRuleTable(w, set)
			case "json":
				return writeJSON(w, set)
			case "yaml":
				b, err := rules.EncodeYAML(set)
				if err != nil {
					return err
				}
				_, err = w.Write(b)
				return err
			}
			return badOutput(output, "table", "json", "yaml")
		},
	}
	outputFlag(cmd, &output, "table", "json", "yaml")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// writeRuleTable prints set's rules as a table, then its revision.
func writeRuleTable(w io.Writer, set *rules.Set) error {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(set.Rules) > 0 {
		fmt.Fprintln(tw, "ID\tPLAN\tENDPOINT\tBY\tLIMIT\tWINDOW\tALGORITHM\tMODE\tFLAGS")
	}
	for _, r := range set.Rules {
		limit, window, algo := strconv.FormatInt(r.Limit, 10), r.Window.String(), r.Algorithm.String()
		if r.Burst != 0 {
			limit += " (burst " + strconv.FormatInt(r.Burst, 10) + ")"
		}
		if r.Unlimited {
			limit, window, algo = "unlimited", "-", "-"
		}
		var flags []string
		if r.Match.Domain != "" {
			flags = append(flags, "domain="+r.Match.Domain) // Envoy RLS only
		}
		for _, name := range slices.Sorted(maps.Keys(r.Match.Headers)) {
			flags = append(flags, "header:"+name+"="+r.Match.Headers[name]) // gateway and middleware only
		}
		if r.Shadow {
			flags = append(flags, "shadow")
		}
		if len(r.Replaces) > 0 {
			flags = append(flags, "replaces="+strings.Join(r.Replaces, "|"))
		}
		if !r.IsEnabled() {
			flags = append(flags, "disabled")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.ID, or(r.Match.Plan, "*"), or(r.Match.Endpoint, "*"), or(string(r.By), string(rules.ByClient)),
			limit, window, algo, or(string(r.FailureMode), string(rules.FailOpen)), or(strings.Join(flags, ","), "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := "no rules"
	switch len(set.Rules) {
	case 0:
	case 1:
		n = "1 rule"
	default:
		n = strconv.Itoa(len(set.Rules)) + " rules"
	}
	_, err := fmt.Fprintf(w, "\n%s, revision %d, default plan %s\n", n, set.Revision, or(set.DefaultPlan, "(none)"))
	return err
}

func newRulesGetCmd(f *adminFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:        "get ID",
		SuggestFor: []string{"show", "describe", "cat"},
		Short:      "Print one rule as YAML",
		Args:       oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			r, err := c.GetRule(cmd.Context(), args[0])
			if err != nil {
				return f.explain(err)
			}
			w := cmd.OutOrStdout()
			switch output {
			case "yaml":
				return writeRuleYAML(w, r)
			case "json":
				return writeJSON(w, r)
			}
			return badOutput(output, "yaml", "json")
		},
	}
	outputFlag(cmd, &output, "yaml", "json")
	return cmd
}

// writeRuleYAML prints one rule as a YAML mapping, in the rules file's
// spelling.
func writeRuleYAML(w io.Writer, r *rules.Rule) error {
	e := yaml.NewEncoder(w)
	e.SetIndent(2)
	if err := e.Encode(r); err != nil {
		return err
	}
	return e.Close()
}

func newRulesApplyCmd(f *adminFlags) *cobra.Command {
	var (
		file   string
		dryRun bool
		prune  bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Make the rules in force what a rules file says",
		Long: `Make the rules in force what a rules YAML file says, in one change.

The file is checked here first: an invalid one is reported with the line
and field that are wrong, and nothing is sent. Then rules that are not in
the file are deleted, new ones created and changed ones updated, and the
changes are printed:

  + rule free-per-user
  ~ rule partner: limit 1000 → 2000, window 1m → 1h
  - rule old-burst

The file's rules list is always complete ("rules: []" deletes every rule).
A file without a rules: list (an empty file, or the empty output of a
failed command piped into -f -) is refused and nothing is sent, unless
--prune says that it means "delete every rule". Its clients and
default_plan replace those in force when the file has them and leave them
alone when it does not. With --dry-run the changes are printed and nothing
is applied. -f - reads the file from standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("rules apply: -f FILE is required (see 'sluice rules apply --help')")
			}
			set, err := readRulesFile(file, cmd.InOrStdin(), prune)
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			res, err := c.Apply(cmd.Context(), set, dryRun)
			if err != nil {
				return f.explain(err)
			}
			return writeApplyResult(cmd.OutOrStdout(), res, dryRun)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "rules YAML file to apply (- for standard input)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes without applying them")
	cmd.Flags().BoolVar(&prune, "prune", false, `allow a file without a "rules:" list, which deletes every rule`)
	return cmd
}

// readRulesFile reads and validates a rules file; errors name the file and,
// for a bad field, its line. A file without a rules: list is refused
// unless prune, and then means no rules.
func readRulesFile(name string, stdin io.Reader, prune bool) (*rules.Set, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 64<<20))
		name = "standard input"
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("rules apply: %w", err)
	}
	set, err := rules.ParseRulesFile(b)
	if errors.Is(err, rules.ErrNoRules) {
		if !prune {
			return nil, fmt.Errorf("%s: no \"rules:\" list (%d bytes read), and applying it would delete every rule; nothing was sent. To delete every rule, write \"rules: []\" or pass --prune", name, len(b))
		}
		set, err = rules.ParseYAML(b)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return set, nil
}

func newRulesDeleteCmd(f *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:        "delete ID",
		SuggestFor: []string{"remove", "rm", "del"},
		Short:      "Delete one rule",
		Args:       oneID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if err := c.DeleteRule(cmd.Context(), args[0]); err != nil {
				return f.explain(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "- rule %s\n", args[0])
			return err
		},
	}
}

// writeApplyResult prints the changes of an apply, one a line, then what
// became of them.
func writeApplyResult(w io.Writer, res *adminclient.ApplyResult, dryRun bool) error {
	var b bytes.Buffer
	var created, updated, deleted int
	for _, c := range res.Changes {
		b.WriteString(formatChange(c))
		b.WriteByte('\n')
		switch c.Op {
		case "create":
			created++
		case "update":
			updated++
		case "delete":
			deleted++
		}
	}
	switch {
	case len(res.Changes) == 0:
		fmt.Fprintf(&b, "no changes: the rules in force already match (revision %d)\n", res.Revision)
	case dryRun:
		fmt.Fprintf(&b, "dry run: %d to create, %d to update, %d to delete; nothing applied (revision %d)\n",
			created, updated, deleted, res.Revision)
	default:
		fmt.Fprintf(&b, "applied: %d created, %d updated, %d deleted; revision %d\n", created, updated, deleted, res.Revision)
	}
	_, err := w.Write(b.Bytes())
	return err
}
