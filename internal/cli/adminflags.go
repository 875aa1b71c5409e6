package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/admin"
)

// adminGuardFlags are the admin listener's flags serve and gateway share
// besides --admin-listen and --admin-token: who may reach it from a
// browser, and profiling.
type adminGuardFlags struct {
	allowedHosts   []string
	allowedOrigins []string
	pprof          bool
}

// addAdminGuardFlags registers --admin-allowed-host, --admin-allowed-origin
// and --pprof on fl.
func addAdminGuardFlags(fl *pflag.FlagSet, f *adminGuardFlags) {
	fl.StringSliceVar(&f.allowedHosts, "admin-allowed-host", nil, "names the admin API answers to in Host besides its --admin-listen host, localhost and IP addresses, comma-separated, e.g. gw-01,sluice-admin.internal (others are refused: DNS rebinding)")
	fl.StringSliceVar(&f.allowedOrigins, "admin-allowed-origin", nil, "web origins whose pages may call the admin API, comma-separated, e.g. https://console.internal (default: none; tools send no Origin)")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on the admin listener, behind --admin-token (never the command line)")
}

// config returns the admin API's configuration.
func (f adminGuardFlags) config(listen, token string, log *slog.Logger) admin.Config {
	return admin.Config{Token: token, Logger: log, Listen: listen,
		AllowedHosts: f.allowedHosts, AllowedOrigins: f.allowedOrigins, Pprof: f.pprof}
}

// checkAdmin refuses, before anything starts, an admin listener that
// cannot be served safely: a malformed --admin-token, a non-loopback
// address without one, a bad --admin-allowed-host or -origin.
func (f adminGuardFlags) checkAdmin(listen, token string) error {
	if err := admin.CheckBind(listen, token); err != nil {
		return err
	}
	return admin.CheckAllowed(f.allowedHosts, f.allowedOrigins)
}

// checkSecret returns an error naming the flag when the value of a secret
// flag is set but blank or malformed: only spaces, a control character (a
// newline read from a file), or spaces around it. "" is unset: no error.
func checkSecret(flag, v string) error {
	if v == "" {
		return nil
	}
	what := ""
	switch {
	case strings.TrimSpace(v) == "":
		what = "is blank: give the secret, or leave the flag unset"
	case strings.ContainsFunc(v, unicode.IsControl):
		what = "holds a control character (a newline read from a file?): give the secret alone"
	case strings.TrimSpace(v) != v:
		what = "starts or ends with a space (copied with the line around it?): give the secret alone"
	default:
		return nil
	}
	return fmt.Errorf("--%s (%s) %s", flag, EnvName(flag), what)
}

// secretFlags are the flags whose value is a secret. warnSecretArgs warns
// when one is given on the command line.
var secretFlags = []string{"admin-token", "data-token", "redis-password", "jwt-hs256-secret"}

// warnSecretArgs warns on w about each secret given on cmd's command line,
// where every user of the machine reads it (ps, /proc/<pid>/cmdline), and
// names the environment variable to use instead. A --rules URL holding a
// password counts. Call it before the environment is bound.
func warnSecretArgs(cmd *cobra.Command, w io.Writer) {
	fl := cmd.Flags()
	for _, name := range secretFlags {
		if f := fl.Lookup(name); f != nil && f.Changed && f.Value.String() != "" {
			fmt.Fprintf(w, "sluice: warning: --%s on the command line is visible to every user of this machine (ps); set %s instead\n",
				name, EnvName(name))
		}
	}
	if f := fl.Lookup("rules"); f != nil && f.Changed {
		if u, err := url.Parse(f.Value.String()); err == nil && u.User != nil {
			if _, hasPass := u.User.Password(); hasPass {
				fmt.Fprintf(w, "sluice: warning: the --rules URL holds a password, visible on the command line to every user of this machine (ps); set %s, or leave the password out and use PGPASSWORD or ~/.pgpass\n",
					EnvName("rules"))
			}
		}
	}
}
