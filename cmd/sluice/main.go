// Command sluice is the distributed rate limiter: the decision service, the
// gateway, the rules client and the load generator. See `sluice --help`.
package main

import (
	"os"

	"github.com/sluicehq/sluice/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
