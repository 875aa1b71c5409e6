package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/rules"
)

func newRulesImportCmd() *cobra.Command {
	var out, algo string
	var merge bool
	var charge []string
	cmd := &cobra.Command{
		Use:   "import PATH",
		Short: "Convert envoyproxy/ratelimit configuration files into a sluice rules file",
		Long: `Convert envoyproxy/ratelimit's configuration — one YAML file, or a
directory whose *.yaml and *.yml files are read as that service reads its
runtime directory (hidden files skipped), one domain per file — into a
sluice rules file, written to standard output or to -o FILE.

Each descriptor with a rate_limit becomes one rule: match.domain and
match.entries (the chain of keys and values down to it), keyed by the
entries without a fixed value (or global), requests_per_unit per unit as a
fixed window (--algorithm picks another; 0 denies every call), unlimited
as unlimited, name and replaces as name and replaces, shadow_mode as
shadow, quota_mode as quota; a descriptor with neither rate_limit nor
nested descriptors is an unlimited rule. What envoyproxy/ratelimit
refuses is an error naming the file, line and descriptor, and nothing is
written. See docs/envoy.md. (sluice serve also serves such a directory
directly, following its changes: RUNTIME_ROOT, RUNTIME_SUBDIRECTORY.)

  sluice rules import /srv/runtime_data/current/ratelimit/config > rules.yaml
  sluice serve --rules rules.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := readEnvoyFiles(args[0])
			if err != nil {
				return err
			}
			opt := envoyconf.Options{MergeDomains: merge}
			if opt.ChargeAfterResponse, err = envoyconf.ParseSelectors(charge); err != nil {
				return fmt.Errorf("rules import: --charge-after-response %w", err)
			}
			set, notes, err := envoyconf.Load(files, opt)
			if err != nil {
				return fmt.Errorf("rules import: %w", err)
			}
			for _, n := range notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "sluice: rules import: note: "+n)
			}
			kind, err := algorithm.ParseKind(algo)
			if err != nil {
				return fmt.Errorf("rules import: --algorithm: %w", err)
			}
			for i := range set.Rules {
				set.Rules[i].Algorithm = kind
			}
			if err := set.Validate(); err != nil {
				return fmt.Errorf("rules import: with --algorithm %s: %w", algo, err)
			}
			b, err := rules.EncodeYAML(set)
			if err != nil {
				return err
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			return os.WriteFile(out, b, 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the rules file here instead of standard output")
	cmd.Flags().BoolVar(&merge, "merge-domains", false, "merge the files of one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); without it a domain in two files is an error")
	cmd.Flags().StringSliceVar(&charge, "charge-after-response", nil, "the descriptors whose calls with a hits_addend above 0 are charges after the response: their rules get charge: after_response (domain, domain:key or domain:key=value, comma-separated; as serve's --envoy-charge-after-response)")
	cmd.Flags().StringVar(&algo, "algorithm", "fixed_window", "algorithm of every imported rule: fixed_window counts as envoyproxy/ratelimit does; token_bucket, leaky_bucket, sliding_window or sliding_log smooth the window's edges")
	return cmd
}

// readEnvoyFiles reads path, a file or a directory of *.yaml/*.yml files
// (not recursive, hidden files skipped), in name order.
func readEnvoyFiles(path string) ([]envoyconf.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rules import: %w", err)
	}
	var names []string
	if fi.IsDir() {
		des, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rules import: %w", err)
		}
		for _, de := range des {
			n := de.Name()
			if de.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			names = append(names, filepath.Join(path, n))
		}
		if len(names) == 0 {
			return nil, errors.New("rules import: " + path + ": no *.yaml or *.yml file")
		}
		sort.Strings(names)
	} else {
		names = []string{path}
	}
	var files []envoyconf.File
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("rules import: %w", err)
		}
		files = append(files, envoyconf.File{Name: n, Data: b})
	}
	return files, nil
}
