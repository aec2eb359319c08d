package cli_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemoSaysWhatItCounts: the number of records created at the CRM is
// what its sentence says it counts, one per operation the CRM carried
// out (succeeded, or uncertain after it committed), whatever its retries:
// not one per order, since every operation is for the same order, and
// the rejected one and the one told 429 created nothing.
func TestDemoSaysWhatItCounts(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	out, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "one per order")
	m := regexp.MustCompile(`records created at the CRM: (\d+)  \(one per operation the CRM carried out, whatever its retries\)\n`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	carriedOut := regexp.MustCompile(`(?m)^   DEMO-OP-\d+\s+(succeeded|uncertain)\s`).FindAllString(out, -1)
	require.Equal(t, strconv.Itoa(len(carriedOut)), m[1], "the count and the ledger's table agree:\n%s", out)
	require.Regexp(t, `(?m)^   DEMO-OP-021\s+failed \(rejected\)`, out, "one reached the CRM and created nothing")
	require.Regexp(t, `(?m)^   DEMO-OP-025\s+pending`, out, "so did the one told 429")

	// A ledger given with --db is kept, and nothing says otherwise.
	require.NotContains(t, out, "temporary")
	require.NotContains(t, out, "removed")
	_, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:"))
	require.NoError(t, err)
}

// TestDemoSaysItRemovesItsLedger: without --db the demo announces a
// temporary ledger as such and, at the end, says that it removed it, as
// it did.
func TestDemoSaysItRemovesItsLedger(t *testing.T) {
	t.Parallel()
	out, errOut, code := run(t, "demo", "--no-serve")
	require.Equal(t, 0, code, errOut)
	first := regexp.MustCompile(`^opledger demo: ledger at sqlite:(\S+) \(temporary: removed when the demo ends\)\n`).FindStringSubmatch(out)
	require.NotNil(t, first, out)
	last := "\nThe ledger was temporary and has been removed (sqlite:" + first[1] + "); give --db, e.g. --db sqlite:demo.db, to keep one.\n"
	require.True(t, strings.HasSuffix(out, last), out)
	_, err := os.Stat(first[1])
	require.ErrorIs(t, err, fs.ErrNotExist, "removed, as said")
	_, err = os.Stat(filepath.Dir(first[1]))
	require.ErrorIs(t, err, fs.ErrNotExist, "its temporary directory too")
}
