package deploy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/cli"
)

// otherEnv are the variables deploy files may set besides SLUICE_<FLAG>:
// the Go runtime's.
var otherEnv = map[string]bool{"GOMAXPROCS": true, "GOMEMLIMIT": true, "GOGC": true}

// checkCommand checks that args (without the binary: "serve", "--redis",
// ...) is a command line sluice accepts — the subcommand exists and takes
// every flag given — and that every SLUICE_ variable of env names a flag
// of that subcommand (sluice reads SLUICE_<FLAG> for every flag, and
// ignores any other: a misspelt variable would be a setting silently
// lost). where names the file for errors.
func checkCommand(t *testing.T, where string, args []string, env []string) {
	t.Helper()
	for _, p := range commandProblems(where, args, env) {
		t.Error(p)
	}
}

// commandProblems is checkCommand's findings.
func commandProblems(where string, args []string, env []string) []string {
	var problems []string
	errorf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	root := cli.NewRoot()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		errorf("%s: sluice %s: no such subcommand (%v)", where, strings.Join(args, " "), err)
		return problems
	}
	if err := cmd.ParseFlags(rest); err != nil {
		errorf("%s: sluice %s: %v", where, strings.Join(args, " "), err)
	}
	if extra := cmd.Flags().Args(); len(extra) > 0 {
		errorf("%s: sluice %s: arguments %q that are no flags", where, strings.Join(args, " "), extra)
	}
	byEnv := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { byEnv[cli.EnvName(f.Name)] = true })
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "SLUICE_"):
			if !byEnv[name] {
				errorf("%s: %s names no flag of sluice %s", where, name, cmd.Name())
			}
		case !otherEnv[name]:
			errorf("%s: %s is not a variable sluice reads", where, name)
		}
	}
	return problems
}

func TestCheckCommandCatches(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []string
	}{
		{[]string{"serve", "--no-such-flag"}, nil},
		{[]string{"serve"}, []string{"SLUICE_NO_SUCH_FLAG=1"}},
		{[]string{"serve"}, []string{"SLUICE_UPSTREAM=http://x"}}, // a gateway flag
		{[]string{"serve"}, []string{"REDIS_URL=x"}},
		{[]string{"serv"}, nil},
	} {
		if len(commandProblems("case", c.args, c.env)) == 0 {
			t.Errorf("checkCommand(%q, %q) passed, want an error", c.args, c.env)
		}
	}
}
