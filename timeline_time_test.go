package opledger_test

import (
	"context"
	"encoding/json"
	"regexp"
	"sync/atomic"
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

// TestReconcileTimelineTimesInMilliseconds: the times the reconciler's
// and the protection's timeline entries give (a deferral's next check,
// when absence counts, when the destination idempotency key is honoured
// until and when its retention ended) are written as a claim's lease end
// is, in UTC to the millisecond, not to the second: each names the time
// the operation holds.
func TestReconcileTimelineTimesInMilliseconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var offset atomic.Int64
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ms := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
	uncertain := func(key string) {
		t.Helper()
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		c, err := l.Claim(ctx, key, opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)
	}
	last := func(key, event string) string {
		t.Helper()
		tl, err := l.Timeline(ctx, key)
		require.NoError(t, err)
		for i := len(tl) - 1; i >= 0; i-- {
			if tl[i].Event == event {
				return tl[i].Evidence
			}
		}
		t.Fatalf("%s: no %q entry", key, event)
		return ""
	}

	uncertain("r:1")
	op, err := l.DeferReconcile(ctx, "r:1", 90*time.Second+123456*time.Microsecond, "lookup: 502")
	require.NoError(t, err)
	require.Equal(t, "next check at "+ms(*op.NotBefore)+"; lookup: 502", last("r:1", "reconcile deferred"))

	uncertain("r:2")
	op, _, err = l.Reconcile(ctx, "r:2", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute + 234567*time.Microsecond})
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	require.Equal(t, "absence counts only after "+ms(*op.NotBefore), last("r:2", "lookup empty within visibility delay"))

	uncertain("r:3")
	op, _, err = l.Reconcile(ctx, "r:3", opledger.Finding{ProtectionRetention: time.Hour + 345678*time.Microsecond})
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.NotNil(t, op.ProtectedUntil)
	until := *op.ProtectedUntil
	require.Equal(t, "destination idempotency key honoured until "+ms(until), last("r:3", "protected retry"))
	offset.Store(int64(2 * time.Hour))
	_, err = l.Claim(ctx, "r:3", opledger.ClaimOptions{})
	require.Error(t, err)
	require.Contains(t, last("r:3", "protection expired"), "retention ended at "+ms(until)+" before")

	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	for _, key := range []string{"r:1", "r:2", "r:3"} {
		tl, err := l.Timeline(ctx, key)
		require.NoError(t, err)
		for _, e := range tl {
			for _, s := range stamp.FindAllString(e.Evidence, -1) {
				require.Regexp(t, `\.\d{3}Z$`, s, "%s: %s", e.Event, e.Evidence)
			}
		}
	}
}
