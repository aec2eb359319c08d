package opledger_test

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestTimelineTimesInMilliseconds: the times a timeline entry's evidence
// gives (a claim's lease end, a retry's earliest time) are written in UTC
// to the millisecond ("lease until 2026-12-07T07:10:03.326Z"), not with
// the store's microseconds, and name the time the operation holds.
func TestTimelineTimesInMilliseconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Lease: 1500*time.Millisecond + 777*time.Microsecond})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, _, err = l.Record(ctx, opledger.Intent{Key: "p:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "p:1", opledger.ClaimOptions{})
	require.NoError(t, err)
	op, err := l.Report(ctx, "p:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
	require.NoError(t, err)
	require.NotNil(t, op.NotBefore)
	tl, err := l.Timeline(ctx, "p:1")
	require.NoError(t, err)
	ms := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
	evidence := map[string]string{}
	for _, e := range tl {
		evidence[e.Event] = e.Evidence
	}
	require.Equal(t, "attempt 1, fencing token 1, lease until "+ms(c.LeaseExpiresAt), evidence["claimed"])
	require.Equal(t, "503; next attempt not before "+ms(*op.NotBefore), evidence["retryable"])
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	for _, e := range tl {
		for _, s := range stamp.FindAllString(e.Evidence, -1) {
			require.Regexp(t, `\.\d{3}Z$`, s, "%s: %s", e.Event, e.Evidence)
		}
	}
}
