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
// which the parent does not have, or come before it
// (opledger ops --db X bogus: it used to say "unknown flag: --db"), and
// when --help comes with it (opledger ops bogus --help used to print the
// parent's help and exit 0).
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
		for _, flags := range [][]string{nil, {"--db", "sqlite:x.db"}, {"--limit=x"}, {"-x"}, {"--help"}, {"-h"}, {"--db", "sqlite:x.db", "--help"}} {
			for _, before := range []bool{false, true} {
				if before && flags != nil && flags[0] == "-x" {
					// Unknown, -x may take the word as its value (as
					// --db X does): its error is said.
					continue
				}
				stdout.Reset()
				stderr.Reset()
				args := append(append([]string{}, path...), append(flags, "no-such-command")...)
				if !before {
					args = append(append(append([]string{}, path...), "no-such-command"), flags...)
				}
				require.Equal(t, ExitUsage, Main(args, &stdout, &stderr), "%v: %s", args, stdout.String())
				require.Empty(t, stdout.String(), args)
				require.Equal(t, want, stderr.String(), args)
			}
		}
		// A flag the parent lacks, with no word after it, is still
		// that flag's error.
		stdout.Reset()
		stderr.Reset()
		args := append(append([]string{}, path...), "--db", "sqlite:x.db")
		require.Equal(t, ExitUsage, Main(args, &stdout, &stderr), "%v: %s", args, stdout.String())
		require.Equal(t, `opledger: unknown flag: --db (see `+cmdPath+` --help)`+"\n", stderr.String(), args)
	}
}

// TestFindingUnknownWordsLeavesHelpAndCompletion: the check for a word no
// subcommand has runs before cobra adds its help and completion-request
// commands; both still answer.
func TestFindingUnknownWordsLeavesHelpAndCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"help", "ops"}, "Usage:"},
		{[]string{"ops", "--help"}, "Usage:"},
		{[]string{"__complete", "ops", "li"}, "list"},
		{[]string{"__completeNoDesc", "ops", "li"}, "list"},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, ExitOK, Main(tc.args, &stdout, &stderr), "%v: %s", tc.args, stderr.String())
		require.Contains(t, stdout.String(), tc.out, tc.args)
	}
}
