package opledger_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

func hexSHA256(b string) string {
	sum := sha256.Sum256([]byte(b))
	return hex.EncodeToString(sum[:])
}

// execStoreSQL runs one statement on the store at dsn, as an older
// version of opledger could have left it.
func execStoreSQL(t *testing.T, dsn, q string) {
	t.Helper()
	ctx := context.Background()
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, q)
		require.NoError(t, err)
		return
	}
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, q)
	require.NoError(t, err)
}

// TestRedeliveryComparesJSONContent: a redelivery whose payload is the
// same JSON encoded otherwise (member order, whitespace, a number's
// spelling, a string's escapes) is not flagged payload_differs, on its
// answer nor in GetEvent; a number of another exact value is, even where
// a double cannot tell the two apart. An event recorded before (its digest
// over the raw bytes) still matches a redelivery of the same bytes.
func TestRedeliveryComparesJSONContent(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			l, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			receive := func(id, delivery, payload string) *opledger.EventResult {
				t.Helper()
				res, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: id, DeliveryID: delivery,
					Type: "submission.accepted", Payload: json.RawMessage(payload)})
				require.NoError(t, err)
				return res
			}
			noneDiffer := func(id string, want ...bool) {
				t.Helper()
				d, err := l.GetEvent(ctx, "forms", id)
				require.NoError(t, err)
				got := []bool{}
				for _, dl := range d.Deliveries {
					got = append(got, dl.PayloadDiffers)
				}
				require.Equal(t, want, got, "GetEvent's deliveries, payload_differs")
			}

			first := receive("evt-1", "d1", `{"a":1,"b":[2,"x"],"c":{"d":null}}`)
			require.False(t, first.Delivery.PayloadDiffers)
			require.Equal(t, hexSHA256(`{"a":1,"b":[2,"x"],"c":{"d":null}}`), first.Event.PayloadSHA256,
				"payload_sha256 is the digest of the canonical form")
			for i, same := range []string{
				"{\"c\": {\"d\": null},\n  \"b\": [ 2, \"x\" ], \"a\": 1}",
				`{"b":[2.0,"\u0078"],"a":1e0,"c":{"d":null}}`,
			} {
				res := receive("evt-1", "d"+string(rune('2'+i)), same)
				require.True(t, res.Duplicate)
				require.False(t, res.Delivery.PayloadDiffers, "the same JSON, re-encoded: %s", same)
			}
			other := receive("evt-1", "d4", `{"a":1,"b":[2,"y"],"c":{"d":null}}`)
			require.True(t, other.Delivery.PayloadDiffers, "other content is flagged")
			noneDiffer("evt-1", false, false, false, true)

			// Exact numbers: 2^53+1 is not 2^53, though a double holds both as 2^53.
			receive("evt-2", "", `{"n":9007199254740993}`)
			require.False(t, receive("evt-2", "", `{ "n" : 9007199254740993.0 }`).Delivery.PayloadDiffers)
			require.True(t, receive("evt-2", "", `{"n":9007199254740992}`).Delivery.PayloadDiffers)
			noneDiffer("evt-2", false, false, true)

			// An event recorded before this change: its digest and its first
			// delivery's are of the raw bytes.
			raw := `{"z": 1, "y": 2}`
			receive("evt-old", "d1", raw)
			execStoreSQL(t, dsn, `UPDATE events SET payload_sha256 = '`+hexSHA256(raw)+`' WHERE event_id = 'evt-old'`)
			execStoreSQL(t, dsn, `UPDATE deliveries SET payload_sha256 = '`+hexSHA256(raw)+`' WHERE event_id = 'evt-old'`)
			require.False(t, receive("evt-old", "d2", raw).Delivery.PayloadDiffers, "the same bytes as an old event's")
			require.True(t, receive("evt-old", "d3", `{"z": 1, "y": 3}`).Delivery.PayloadDiffers)
			// Re-encoded, an old event's payload cannot be told from another:
			// only the digest of its bytes was kept.
			require.True(t, receive("evt-old", "d4", `{"y":2,"z":1}`).Delivery.PayloadDiffers)
			noneDiffer("evt-old", false, false, true, true)
			d, err := l.GetEvent(ctx, "forms", "evt-old")
			require.NoError(t, err)
			require.Equal(t, hexSHA256(raw), d.Event.PayloadSHA256, "an old event keeps its digest")

			// A payload JCS refuses (two members of one name) is compared by
			// its bytes.
			dup := `{"a":1,"a":2}`
			res := receive("evt-dup", "", dup)
			require.Equal(t, hexSHA256(dup), res.Event.PayloadSHA256)
			require.False(t, receive("evt-dup", "", dup).Delivery.PayloadDiffers)
			require.True(t, receive("evt-dup", "", `{"a":1, "a":2}`).Delivery.PayloadDiffers)
		})
	}
}
