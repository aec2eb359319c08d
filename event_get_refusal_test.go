package opledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestGetEventNamesWhatIsWrong: GetEvent refused a source or event id
// outside the key syntax with "source and event_id must satisfy the key
// syntax", naming neither which nor why; it names both now, as the Go
// client does before it sends the request.
func TestGetEventNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	l := openSQLiteLedger(t)
	ctx := context.Background()
	for name, tc := range map[string]struct{ source, id, want string }{
		"empty source":   {"", "evt-1", "invalid input: source is empty"},
		"empty event id": {"forms", "", "invalid input: event_id is empty"},
		"source":         {"for ms", "evt-1", "invalid input: source is not in the key syntax: "},
		"event id":       {"forms", "a@b.example", "invalid input: event_id is not in the key syntax: keys must carry no personal data"},
	} {
		_, err := l.GetEvent(ctx, tc.source, tc.id)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}
