package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// OldestDueScan: an operation became due at the latest of its creation,
// its retry time and its last change; one still waiting for its retry is
// skipped; the scan stops at the first operation no older than the best
// found, and gives up, unconcluded, past OldestDueScanRows.
func TestOldestDueScan(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	now := at(1000)
	id := func(k string) store.OperationID { return store.OperationID{Tenant: "t", Key: k} }
	var zero time.Time

	var s store.OldestDueScan
	require.True(t, s.Next(now, id("backoff"), at(0), at(2000), at(10)), "waits for its retry: skipped")
	require.True(t, s.Next(now, id("approved"), at(1), zero, at(500)), "created at 1, approved (changed) at 500")
	require.True(t, s.Next(now, id("retried"), at(2), at(300), at(20)), "due again at 300")
	require.True(t, s.Next(now, id("plain"), at(250), zero, at(250)))
	require.False(t, s.Next(now, id("younger"), at(300), zero, at(300)), "created no earlier than the best: stop")
	require.True(t, s.Concluded())
	require.Equal(t, id("plain"), s.ID)
	require.Equal(t, at(250), s.Since)

	var all store.OldestDueScan
	require.True(t, all.Next(now, id("only"), at(5), zero, at(5)))
	require.True(t, all.Concluded(), "the rows ended: every pending operation was read")
	require.Equal(t, at(5), all.Since)

	var none store.OldestDueScan
	require.True(t, none.Concluded())
	require.True(t, none.Since.IsZero(), "nothing pending: nothing due")

	var long store.OldestDueScan
	for i := range store.OldestDueScanRows {
		require.True(t, long.Next(now, id(fmt.Sprint(i)), at(i), at(5000), at(i)))
	}
	require.False(t, long.Next(now, id("more"), at(2000), zero, at(2000)), "past the limit")
	require.False(t, long.Concluded(), "the store must ask its index instead")
}
