package opledger

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/knownfp"
)

// TestClaimTakesKnownFingerprintOnlyForItsIntent checks that a claim takes
// the fingerprint its context carries (internal/knownfp) for exactly its
// intent, and computes its own for any other: a fingerprint handed over
// for another payload never becomes an operation's.
func TestClaimTakesKnownFingerprintOnlyForItsIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{Worker: "w", Lease: time.Minute})
	require.NoError(t, err)
	defer l.Close()

	in := Intent{Key: "order:1", Action: "create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)}
	// A marker no payload hashes to, so that taking it shows.
	known := knownfp.With(ctx, in.Action, in.Destination, in.Payload, 1, "sha256:known")
	c, err := l.Claim(known, in.Key, ClaimOptions{Intent: &in})
	require.NoError(t, err)
	require.Equal(t, "sha256:known", c.Operation.Fingerprint, "taken for its own intent")

	other := Intent{Key: "order:2", Action: "create", Destination: "crm", Payload: json.RawMessage(`{"units":3}`)}
	c, err = l.Claim(known, other.Key, ClaimOptions{Intent: &other})
	require.NoError(t, err)
	want, err := Fingerprint(other.Action, other.Destination, other.Payload, 1)
	require.NoError(t, err)
	require.Equal(t, want, c.Operation.Fingerprint, "computed for another payload")
}
