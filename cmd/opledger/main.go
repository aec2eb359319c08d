// Command opledger is the operation ledger's command-line tool: the demo,
// migrations and, as they land, the server, the proxy and the operator
// commands. See README.md.
package main

import (
	"os"

	"github.com/opledger/opledger/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
