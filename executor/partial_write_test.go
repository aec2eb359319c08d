package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestActedBeforeBodyIsNeverResent: a destination that acts on a request
// once it has read its headers (an upload that creates its record first)
// and then goes away while the body is still arriving leaves the attempt
// uncertain: it was recorded retryable ("not sent"), and the next attempt
// sent it again — a second effect.
func TestActedBeforeBodyIsNeverResent(t *testing.T) {
	t.Parallel()
	dest := fakedest.NewHeaderActor(t, "")
	// Bounds far above the call's time, even on a loaded machine, where
	// rendering the 4 MiB body may take seconds: a call that timed out
	// before it had a connection would rightly be "not sent".
	files, err := destination.NewHTTP(destination.HTTPConfig{Name: "files", URL: dest.URL() + "/files", Ref: "/id",
		Timeout: destination.Duration(time.Minute)},
		destination.LoadOptions{})
	require.NoError(t, err)
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) {
		o.Extra = []destination.Destination{files}
		o.Executor.Lease, o.Executor.CallTimeout = 3*time.Minute, 2*time.Minute
	})
	r.Record("upload:U1:create", "files", `{"content":"`+strings.Repeat("a", 4<<20)+`"}`)

	op := r.Step()
	require.Equal(t, opledger.StateUncertain, op.State, "last error: %s", op.LastError)
	require.Nil(t, r.Step(), "nothing is due: the uncertain attempt is not sent again")
	require.Equal(t, 1, dest.Acted())
}
