package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestEveryParentRefusesUnknownSubcommands walks the whole command tree, so
// that a parent command added later is held to the same rule: alone it
// prints its help (0); with an unknown subcommand it is a usage error (2),
// said as one, also when flags follow it (opledger ops bogus --db X),
// which the parent does not have.
func TestEveryParentRefusesUnknownSubcommands(t *testing.T) {
	var parents [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasSubCommands() {
			parents = append(parents, path)
		}
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(newRoot(nil, nil), nil)
	require.GreaterOrEqual(t, len(parents), 6, "root, tokens, ops, events, lab, completion: %v", parents)
	for _, path := range parents {
		var stdout, stderr bytes.Buffer
		require.Equal(t, ExitOK, Main(path, &stdout, &stderr), "%v alone: %s", path, stderr.String())
		require.Contains(t, stdout.String(), "Usage:", "%v alone prints its help", path)

		cmdPath := strings.Join(append([]string{"opledger"}, path...), " ")
		want := `opledger: unknown command "no-such-command" for "` + cmdPath + `" (see ` + cmdPath + ` --help)` + "\n"
		for _, flags := range [][]string{nil, {"--db", "sqlite:x.db"}, {"--limit=x"}, {"-x"}} {
			stdout.Reset()
			stderr.Reset()
			args := append(append(append([]string{}, path...), "no-such-command"), flags...)
			require.Equal(t, ExitUsage, Main(args, &stdout, &stderr), "%v: %s", args, stdout.String())
			require.Equal(t, want, stderr.String(), args)
		}
	}
}
