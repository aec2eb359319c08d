package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// pinInItsFingerprint finds a three-digit pin whose payload's fingerprint
// (at version) contains the pin itself: the timeline entry of an approval
// or a revision, which names the fingerprint, is then stored with those
// digits masked, as every sensitive value in free text is.
func pinInItsFingerprint(t *testing.T, version int64) json.RawMessage {
	t.Helper()
	for n := range 1000 {
		pin := fmt.Sprintf("%03d", n)
		payload := json.RawMessage(`{"pin":"` + pin + `"}`)
		fp, err := opledger.Fingerprint("card.set_pin", "cards", payload, version)
		require.NoError(t, err)
		if strings.Contains(fp, pin) {
			return payload
		}
	}
	t.Fatal("no pin found")
	return nil
}

// TestRepeatReplayedWhenEvidenceIsScrubbed: an approval and a revision
// sent again are replays even when the evidence stored for the first
// was scrubbed of a sensitive value that the fingerprint's digits
// happen to contain.
func TestRepeatReplayedWhenEvidenceIsScrubbed(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			op, _, err := l.Record(ctx, opledger.Intent{Key: "card:1", Action: "card.set_pin", Destination: "cards",
				Payload: pinInItsFingerprint(t, 1), SensitiveFields: []string{"pin"}, RequiresApproval: true})
			require.NoError(t, err)
			a := opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lead"}
			_, _, err = l.Approve(ctx, "card:1", a)
			require.NoError(t, err)
			tl, err := l.Timeline(ctx, "card:1")
			require.NoError(t, err)
			require.Contains(t, tl[len(tl)-1].Evidence, opledger.Mask, "the premise: the stored evidence was scrubbed")
			_, replayed, err := l.Approve(ctx, "card:1", a)
			require.NoError(t, err)
			require.True(t, replayed)

			_, _, err = l.Record(ctx, opledger.Intent{Key: "card:2", Action: "card.set_pin", Destination: "cards",
				Payload: json.RawMessage(`{"pin":"x"}`), SensitiveFields: []string{"pin"}})
			require.NoError(t, err)
			rev := opledger.Revision{Payload: pinInItsFingerprint(t, 2), Version: 2}
			_, _, err = l.Revise(ctx, "card:2", rev)
			require.NoError(t, err)
			_, replayed, err = l.Revise(ctx, "card:2", rev)
			require.NoError(t, err)
			require.True(t, replayed)
		})
	}
}
