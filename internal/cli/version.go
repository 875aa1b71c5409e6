package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// The build stamps these with
//
//	go build -ldflags "-X github.com/sluicehq/sluice/internal/cli.version=v1.2.0 \
//	                   -X github.com/sluicehq/sluice/internal/cli.commit=$(git rev-parse HEAD)" ./cmd/sluice
//
// Unstamped, version is "dev" (or the module version of a `go install
// ...@version` build) and commit comes from the VCS information Go embeds
// (vcs.revision, "-dirty" when the tree had changes).
var (
	version = "dev"
	commit  = ""
)

// buildInfo is what `sluice version` prints.
type buildInfo struct {
	Version, Commit, Go, Platform string
}

// readBuildInfo combines the stamped values with what Go embedded.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	if b.Commit == "" {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" && modified == "true" {
			rev += "-dirty"
		}
		b.Commit = rev
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func (b buildInfo) write(w io.Writer) {
	fmt.Fprintf(w, "sluice %s\ncommit %s\ngo     %s %s\n", b.Version, b.Commit, b.Go, b.Platform)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version sluice was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			readBuildInfo().write(cmd.OutOrStdout())
			return nil
		},
	}
}
