package destination_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/destination"
)

// Every YAML example in docs/destinations.md loads.
func TestDocsExamplesLoad(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/destinations.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(blocks), 5)
	anyEnv := func(string) (string, bool) { return "x", true }
	for i, b := range blocks {
		set, err := destination.Load(b[1], destination.LoadOptions{LookupEnv: anyEnv})
		require.NoError(t, err, "example %d:\n%s", i+1, b[1])
		require.NoError(t, set.Close())
	}
}
