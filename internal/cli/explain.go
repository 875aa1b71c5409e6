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
		envoy    adminclient.ExplainRequest // a whole Envoy request: Domain, Descriptors, HitsAddend
		descs    []string
	)
	cmd := &cobra.Command{
		Use:   "explain --user U|--api-key K|--ip A [--endpoint \"GET /path\"] [--header N=V] [--entry K=V] | --domain D --descriptor K=V[,K=V...]...",
		Short: "Say which rules a call matches, each bucket's state and the decision, taking nothing",
		Long: `Explain a call: the rules it matches, the bucket each would take from with
that bucket's state now, and what sluice would decide — read without taking
anything, so the caller's quota is untouched.

  sluice rules explain --user alice --endpoint "GET /api/orders"
  sluice rules explain --ip 2001:db8::7 --header X-Tenant=acme
  sluice rules explain --entry remote_address=203.0.113.7 --entry path=/login   (an Envoy descriptor)

A whole Envoy ShouldRateLimit request — its domain, each descriptor's
entries (one --descriptor each, entries joined by commas, in order) and its
hits_addend — is explained as the Envoy API would decide it: each
descriptor's rules and buckets, and the overall code:

  sluice rules explain --domain edge --descriptor user=alice --descriptor generic_key=checkout --hits-addend 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if len(descs) > 0 || envoy.Domain != "" {
				if err := parseDescriptors(&envoy, descs); err != nil {
					return err
				}
				ex, err := c.ExplainEnvoy(cmd.Context(), envoy)
				if err != nil {
					return f.explain(err)
				}
				return writeAs(cmd.OutOrStdout(), output, ex, func(w io.Writer) error { return writeEnvoyExplanation(w, ex) })
			}
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
			ex, err := c.Explain(cmd.Context(), req)
			if err != nil {
				return f.explain(err)
			}
			return writeAs(cmd.OutOrStdout(), output, ex, func(w io.Writer) error { return writeExplanation(w, ex) })
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
	fl.StringVar(&envoy.Domain, "domain", "", "an Envoy request's domain (with --descriptor)")
	fl.StringArrayVar(&descs, "descriptor", nil, "an Envoy request's descriptor, its entries KEY=VALUE joined by commas (repeatable, in order; with --domain)")
	fl.Uint32Var(&envoy.HitsAddend, "hits-addend", 0, "an Envoy request's hits_addend (0 means 1)")
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// writeAs writes v as -o says: a table (table) or JSON.
func writeAs(w io.Writer, output string, v any, table func(io.Writer) error) error {
	switch output {
	case "table":
		return table(w)
	case "json":
		return writeJSON(w, v)
	}
	return badOutput(output, "table", "json")
}

// writeExplanation prints an explanation: the decision, then a bucket a line.
func writeExplanation(w io.Writer, ex *adminclient.Explanation) error {
	if err := writeChecked(w, ex.Revision, &ex.Check); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, ex.Note)
	return err
}

// writeChecked prints one check of an explanation under the rules
// revision rev: the decision, the rules matched, then a bucket a line.
func writeChecked(w io.Writer, rev int64, ex *adminclient.Check) error {
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
	fmt.Fprintf(w, "plan %s, rules revision %d, matched: %s\n\n", or(ex.Plan, "(none)"), rev, or(strings.Join(ex.Matched, ", "), "none"))
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
	return nil
}

// parseDescriptors reads the --descriptor flags into r's Descriptors.
func parseDescriptors(r *adminclient.ExplainRequest, descs []string) error {
	if r.Domain == "" {
		return fmt.Errorf("--domain: required with --descriptor, the Envoy request's domain (e.g. --domain edge)")
	}
	if len(descs) == 0 {
		return fmt.Errorf("--descriptor: give at least one with --domain, e.g. --descriptor user=alice")
	}
	for _, d := range descs {
		var desc adminclient.EnvoyDescriptor
		for _, e := range strings.Split(d, ",") {
			k, v, ok := strings.Cut(e, "=")
			if !ok || k == "" {
				return fmt.Errorf("--descriptor %q: want KEY=VALUE entries joined by commas, e.g. generic_key=checkout,user=alice", d)
			}
			desc.Entries = append(desc.Entries, rules.Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return nil
}

// writeEnvoyExplanation prints the overall code, then each check.
func writeEnvoyExplanation(w io.Writer, ex *adminclient.EnvoyExplanation) error {
	fmt.Fprintf(w, "%s (domain %s, rules revision %d)\n\n", ex.OverallCode, ex.Domain, ex.Revision)
	for _, c := range ex.Checks {
		which := make([]string, len(c.Descriptors))
		for i, d := range c.Descriptors {
			which[i] = strconv.Itoa(d)
		}
		fmt.Fprintf(w, "descriptor %s: %s", strings.Join(which, "+"), c.Code)
		switch {
		case c.Empty:
			fmt.Fprintln(w, " (no entries: counts nothing)")
			fmt.Fprintln(w)
			continue
		case c.Code == "OVER_LIMIT" && c.Decision.Allowed:
			// quota mode: reported over, while the request passes on another
			fmt.Fprint(w, " (a quota descriptor over its limit: reported, and the request passes on its other descriptors)")
		case len(c.Descriptors) > 1:
			fmt.Fprint(w, " (united into one check)")
		}
		fmt.Fprintln(w)
		if err := writeChecked(w, ex.Revision, &c.Check); err != nil {
			return err
		}
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
