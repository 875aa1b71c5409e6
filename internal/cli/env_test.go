package cli

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestEnvName(t *testing.T) {
	tests := []struct{ flag, want string }{
		{"admin-listen", "SLUICE_ADMIN_LISTEN"},
		{"admin-token", "SLUICE_ADMIN_TOKEN"},
		{"rules", "SLUICE_RULES"},
		{"ipv6-prefix", "SLUICE_IPV6_PREFIX"},
	}
	for _, tt := range tests {
		if got := EnvName(tt.flag); got != tt.want {
			t.Errorf("EnvName(%q) = %q, want %q", tt.flag, got, tt.want)
		}
	}
}

// envCmd is a command tree like sluice's: a persistent flag on the parent,
// local flags on the child.
type envCmd struct {
	root, child *cobra.Command
	admin       string
	token       string
	limit       int
	window      time.Duration
	verbose     bool
}

func newEnvCmd() *envCmd {
	e := &envCmd{}
	e.root = &cobra.Command{Use: "sluice", SilenceErrors: true, SilenceUsage: true}
	e.root.PersistentFlags().StringVar(&e.admin, "admin", "http://127.0.0.1:9090", "")
	e.child = &cobra.Command{Use: "child", RunE: func(*cobra.Command, []string) error { return nil }}
	e.child.Flags().StringVar(&e.token, "admin-token", "", "")
	e.child.Flags().IntVar(&e.limit, "limit", 10, "")
	e.child.Flags().DurationVar(&e.window, "window", time.Minute, "")
	e.child.Flags().BoolVar(&e.verbose, "verbose", false, "")
	e.root.AddCommand(e.child)
	return e
}

func TestBindEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // substring; "" = no error
		check   func(e *envCmd) string
	}{
		{
			name: "defaults without environment",
			args: []string{"child"},
			check: func(e *envCmd) string {
				if e.admin != "http://127.0.0.1:9090" || e.token != "" || e.limit != 10 || e.window != time.Minute || e.verbose {
					return "flags changed from their defaults"
				}
				return ""
			},
		},
		{
			name: "environment sets local and inherited flags",
			args: []string{"child"},
			env: map[string]string{"SLUICE_ADMIN": "http://10.0.0.1:9090", "SLUICE_ADMIN_TOKEN": "s3cret",
				"SLUICE_LIMIT": "42", "SLUICE_WINDOW": "1h", "SLUICE_VERBOSE": "true"},
			check: func(e *envCmd) string {
				if e.admin != "http://10.0.0.1:9090" || e.token != "s3cret" || e.limit != 42 || e.window != time.Hour || !e.verbose {
					return "a flag did not take its environment value"
				}
				return ""
			},
		},
		{
			name: "flags win over the environment",
			args: []string{"child", "--limit", "7", "--admin", "http://flag"},
			env:  map[string]string{"SLUICE_LIMIT": "42", "SLUICE_ADMIN": "http://env"},
			check: func(e *envCmd) string {
				if e.limit != 7 || e.admin != "http://flag" {
					return "the environment overrode a flag"
				}
				return ""
			},
		},
		{
			name: "an empty variable is ignored",
			args: []string{"child"},
			env:  map[string]string{"SLUICE_LIMIT": ""},
			check: func(e *envCmd) string {
				if e.limit != 10 {
					return "an empty variable changed --limit"
				}
				return ""
			},
		},
		{
			name:    "a bad value names the variable",
			args:    []string{"child"},
			env:     map[string]string{"SLUICE_WINDOW": "soon"},
			wantErr: `SLUICE_WINDOW="soon"`,
		},
		{
			name:    "a bad bool names the variable",
			args:    []string{"child"},
			env:     map[string]string{"SLUICE_VERBOSE": "sometimes"},
			wantErr: `SLUICE_VERBOSE="sometimes"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnvCmd()
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			e.root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return bindEnv(cmd, lookup) }
			e.root.SetArgs(tt.args)
			err := e.root.Execute()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Execute(%v) = %v, want no error", tt.args, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Execute(%v) = %v, want an error containing %q", tt.args, err, tt.wantErr)
			}
			if tt.check != nil {
				if msg := tt.check(e); msg != "" {
					t.Errorf("%s: admin=%q token=%q limit=%d window=%v verbose=%v", msg, e.admin, e.token, e.limit, e.window, e.verbose)
				}
			}
		})
	}
}

// TestRootBindsEnv checks that sluice's own root applies the environment
// to its subcommands, and that flags still win.
func TestRootBindsEnv(t *testing.T) {
	t.Setenv("SLUICE_CONCURRENCY", "0")
	var errOut strings.Builder
	code := run(t.Context(), NewRoot(), []string{"bench"}, &errOut)
	if want := "--concurrency must be 1 to 10000, got 0"; code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("bench with SLUICE_CONCURRENCY=0: exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
	}
	errOut.Reset()
	code = run(t.Context(), NewRoot(), []string{"bench", "--concurrency", "1", "--target", "ftp://x"}, &errOut)
	if want := "--target"; code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("bench --concurrency 1 with SLUICE_CONCURRENCY=0: exit %d, stderr %q; want 1 and an error about %s", code, errOut.String(), want)
	}
}

// TestEveryFlagReadsItsEnvironment: every flag of every sluice command
// (secrets included) is set by its variable SLUICE_<FLAG>, so that no
// secret ever has to be on a command line.
func TestEveryFlagReadsItsEnvironment(t *testing.T) {
	find := func(path []string) *cobra.Command {
		c, _, err := NewRoot().Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Runnable() {
			paths = append(paths, path)
		}
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(NewRoot(), nil)
	n := 0
	for _, path := range paths {
		find(path).Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			v := f.DefValue
			switch {
			case f.Value.Type() == "bool":
				v = strconv.FormatBool(v != "true")
			case v == "" || v == "[]":
				v = "x"
			}
			c := find(path)
			if err := c.ParseFlags(nil); err != nil {
				t.Fatal(err)
			}
			name := EnvName(f.Name)
			err := bindEnv(c, func(k string) (string, bool) { return v, k == name })
			if got := c.Flags().Lookup(f.Name); err != nil || !got.Changed {
				t.Errorf("sluice %s: %s=%q did not set --%s (%v)", strings.Join(path, " "), name, v, f.Name, err)
			}
			n++
		})
	}
	if n < 50 {
		t.Fatalf("checked %d flags, want every flag of every command", n)
	}
}
