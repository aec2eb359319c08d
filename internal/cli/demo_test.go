package cli_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
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

// TestDemoLeavesNoOperationInTheFuture: the walk-through moves the
// ledger's clock forward instead of waiting (past a backoff, past a dead
// worker's lease), yet what it leaves is dated no later than the real
// clock after it ends. Otherwise every other reader (ops list's AGE, the
// console of a server started later on the same --db) would show the
// last operations as made 0s ago for minutes, and a review time as
// further off than it is.
func TestDemoLeavesNoOperationInTheFuture(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	_, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 0, code, errOut)
	after := time.Now()

	ctx := context.Background()
	ledger, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	defer ledger.Close()
	page, err := ledger.List(ctx, opledger.ListOptions{Limit: 50})
	require.NoError(t, err)
	require.NotEmpty(t, page.Items)
	for _, op := range page.Items {
		for what, at := range map[string]time.Time{"created": op.CreatedAt, "updated": op.UpdatedAt, "in its state since": op.StateSince} {
			require.False(t, at.After(after), "%s %s at %s, after the demo ended at %s", op.Key, what, at, after)
		}
	}
}
