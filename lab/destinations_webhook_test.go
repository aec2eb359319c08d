package lab_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/lab"
)

// Duplicate and reordered deliveries reach the real ledger as deliveries
// of one event each: one operation per event, whatever the arrival order.
func TestWebhookSourceDuplicatesAndReorders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	rules, err := opledger.NewRules(opledger.Rule{Name: "lead", Source: "forms", Type: "lead.created",
		Operations: []opledger.OperationRule{{Key: "lead:{data.id}:create", Action: "crm.create", Destination: "crm",
			Payload: map[string]any{"id": "{data.id}"}}}})
	require.NoError(t, err)
	src := lab.NewWebhookSource(lab.WebhookOptions{Source: "forms", Type: "lead.created", Rules: rules})

	src.Emit("e1", json.RawMessage(`{"id": "1"}`))
	src.Emit("e2", json.RawMessage(`{"id": "2"}`))
	require.NoError(t, src.Duplicate("e1"))
	require.NoError(t, src.Reorder(0, 2)) // e1(dup), e2, e1
	require.Equal(t, []string{"e1", "e2", "e1"}, src.Queued())
	require.Error(t, src.Duplicate("nope"))
	require.Error(t, src.Reorder(0, 3))

	var dups []bool
	for {
		res, err := src.DeliverNext(ctx, l)
		require.NoError(t, err)
		if res == nil {
			break
		}
		require.Len(t, res.Operations, 1)
		dups = append(dups, res.Duplicate)
	}
	require.Equal(t, []bool{false, false, true}, dups)
	res, err := src.Deliver(ctx, l, "e2")
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "lead:2:create", res.Operations[0].Key)
	_, err = src.Deliver(ctx, l, "e3")
	require.Error(t, err)

	require.Equal(t, lab.WebhookCounters{Events: 2, Deliveries: 4}, src.Counters())
	stats, err := l.EventStats(ctx, false)
	require.NoError(t, err)
	require.Equal(t, 2, int(stats.Events))
	require.Equal(t, 4, int(stats.Deliveries))
	require.Equal(t, 2, int(stats.DuplicateDeliveries))
	counts, err := l.CountByState(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, counts[opledger.StatePending])
	src.Reset()
	require.Equal(t, lab.WebhookCounters{}, src.Counters())
}
