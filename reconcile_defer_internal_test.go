package opledger

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// timelineReadCountingStore counts the timeline entries its write
// transactions read with ListTimeline.
type timelineReadCountingStore struct {
	store.Store
	rows *atomic.Int64
}

type timelineReadCountingTx struct {
	store.Tx
	rows *atomic.Int64
}

func (s timelineReadCountingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, timelineReadCountingTx{Tx: tx, rows: s.rows})
	})
}

func (t timelineReadCountingTx) ListTimeline(ctx context.Context, tenant, key string) ([]*store.TimelineEntry, error) {
	entries, err := t.Tx.ListTimeline(ctx, tenant, key)
	t.rows.Add(int64(len(entries)))
	return entries, err
}

// TestDeferReadsLastEntryOnly: DeferReconcile compares the operation's
// last timeline entry with the deferral it would write (the same one
// again is not written), and read the whole timeline for it, every entry
// of an operation put off for weeks, at each recheck. It reads the last
// entry alone now (store.Reader.LastTimelineEntry); what it writes is as
// before.
func TestDeferReadsLastEntryOnly(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := Open(ctx, st.NewDSN(t), Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			const key = "defer:L1"
			c, err := l.Claim(ctx, key, ClaimOptions{Intent: &Intent{Key: key, Action: "a", Destination: "legacy"}, Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, Report{Outcome: OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)

			var rows atomic.Int64
			l.store = timelineReadCountingStore{Store: l.store, rows: &rows}
			for _, why := range []string{"not served here", "not served here", "lookup failed: 503", "not served here"} {
				_, err := l.DeferReconcile(ctx, key, time.Minute, why)
				require.NoError(t, err)
			}
			require.Zero(t, rows.Load(), "no timeline read whole")
			tl, err := l.Timeline(ctx, key)
			require.NoError(t, err)
			var deferred []string
			for _, e := range tl {
				if e.Event == eventDeferred {
					_, why, _ := cutDeferral(e.Evidence)
					deferred = append(deferred, why)
				}
			}
			require.Equal(t, []string{"not served here", "lookup failed: 503", "not served here"}, deferred)
		})
	}
}

// cutDeferral splits a deferral's evidence into its next check and why.
func cutDeferral(evidence string) (next, why string, ok bool) {
	rest, ok := strings.CutPrefix(evidence, deferredUntil)
	if !ok {
		return "", "", false
	}
	next, why, _ = strings.Cut(rest, "; ")
	return next, why, true
}
