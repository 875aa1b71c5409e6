package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/adminclient"
	"github.com/sluicehq/sluice/rules"
)

// newRulesExplainCmd is `sluice rules explain`: POST /explain.
func newRulesExplainCmd(f *adminFlags) *cobra.Command {
	var (
		req      adminclient.ExplainRequest
		endpoint string
		headers  []string
		entries  []string
		output   string
	)
	cmd := &cobra.Command{
		Use:   "explain --user U|--api-key K|--ip A [--endpoint \"GET /path\"] [--header N=V] [--entry K=V]",
		Short: "Say which rules a call matches, each bucket's state and the decision, taking nothing",
		Long: `Explain a call: the rules it matches, the bucket each would take from with
that bucket's state now, and what sluice would decide — read without taking
anything, so the caller's quota is untouched.

  sluice rules explain --user alice --endpoint "GET /api/orders"
  sluice rules explain --ip 2001:db8::7 --header X-Tenant=acme
  sluice rules explain --entry remote_address=203.0.113.7 --entry path=/login   (an Envoy descriptor)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoint != "" {
				m, p, ok := strings.Cut(strings.TrimSpace(endpoint), " ")
				if !ok {
					return fmt.Errorf("--endpoint %q: want \"METHOD /path\", e.g. \"GET /api/orders\"", endpoint)
				}
				req.Method, req.Path = m, strings.TrimSpace(p)
			}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return fmt.Errorf("--header %q: want NAME=VALUE, e.g. X-Tenant=acme", h)
				}
				if req.Headers == nil {
					req.Headers = map[string]string{}
				}
				req.Headers[k] = v
			}
			for _, e := range entries {
				k, v, ok := strings.Cut(e, "=")
				if !ok || k == "" {
					return fmt.Errorf("--entry %q: want KEY=VALUE, e.g. remote_address=203.0.113.7", e)
				}
				req.Entries = append(req.Entries, rules.Entry{Key: k, Value: v})
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			ex, err := c.Explain(cmd.Context(), req)
			if err != nil {
				return f.explain(err)
			}
			switch output {
			case "table":
				return writeExplanation(cmd.OutOrStdout(), ex)
			case "json":
				return writeJSON(cmd.OutOrStdout(), ex)
			}
			return badOutput(output, "table", "json")
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.User, "user", "", "the caller's user")
	fl.StringVar(&req.APIKey, "api-key", "", "the caller's API key (sent to the admin API only; answers show its fingerprint, never the key)")
	fl.StringVar(&req.IP, "ip", "", "the caller's IP address")
	fl.StringVar(&endpoint, "endpoint", "", `the call's method and path, e.g. "GET /api/orders"`)
	fl.StringVar(&req.Plan, "plan", "", "the call's plan (default: the registry's or the default plan)")
	fl.Int64Var(&req.Cost, "cost", 0, "the call's cost (0 means 1)")
	fl.StringArrayVar(&headers, "header", nil, "a request header NAME=VALUE (repeatable)")
	fl.StringArrayVar(&entries, "entry", nil, "an Envoy descriptor entry KEY=VALUE (repeatable, in order)")
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// writeExplanation prints an explanation: the decision, then a bucket a line.
func writeExplanation(w io.Writer, ex *adminclient.Explanation) error {
	d := ex.Decision
	if d.Allowed {
		fmt.Fprintf(w, "ALLOWED")
		if d.Rule != "" {
			fmt.Fprintf(w, " (tightest rule %s, %d remaining)", d.Rule, d.Remaining)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "DENIED by %s: %s", or(d.Rule, "(too many rules)"), d.Reason)
		if d.RetryAfter > 0 {
			fmt.Fprintf(w, ", retry in %.1fs", d.RetryAfter)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "plan %s, rules revision %d, matched: %s\n\n", or(ex.Plan, "(none)"), ex.Revision, or(strings.Join(ex.Matched, ", "), "none"))
	if len(ex.Buckets) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RULE\tBUCKET\tREMAINING\tWHOLE IN\tTHIS CALL")
		for _, b := range ex.Buckets {
			verdict := "passes"
			if !b.Allows {
				verdict = "denied: " + b.Reason
			}
			rule := b.Rule
			if b.Shadow {
				rule += " (shadow)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%.1fs\t%s\n", rule, b.Bucket, strconv.FormatInt(b.Remaining, 10),
				strconv.FormatInt(b.Limit, 10), b.ResetAfter, verdict)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintln(w, ex.Note)
	return err
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
