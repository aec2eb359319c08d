package opledger_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	p := opledger.RetryPolicy{MaxAttempts: 10, InitialDelay: time.Second, MaxDelay: 30 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 40: 30 * time.Second} {
		require.Equal(t, want, p.Ceiling(n), "ceiling after attempt %d", n)
	}
	for range 1000 {
		d := p.Backoff(3, 0)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 4*time.Second)
		require.GreaterOrEqual(t, p.Backoff(3, 7*time.Second), 7*time.Second, "Retry-After is a floor")
	}

	// MaxDelay 0 is no cap: the ceiling still doubles, up to what a
	// Duration holds.
	uncapped := opledger.RetryPolicy{MaxAttempts: 100, InitialDelay: time.Second}
	require.Equal(t, 32*time.Second, uncapped.Ceiling(6))
	require.Greater(t, uncapped.Ceiling(80), 100*365*24*time.Hour, "no overflow into a negative delay")
}

func TestOpenRefusesInvalidRetryPolicies(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + t.TempDir() + "/l.db"
	_, err := opledger.Open(t.Context(), dsn, opledger.Options{RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 0}})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, err = opledger.Open(t.Context(), dsn, opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{
		"crm": {MaxAttempts: 3, InitialDelay: -time.Second},
	}})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, `destination "crm"`)
	l, err := opledger.Open(t.Context(), dsn, opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{
		"crm": {MaxAttempts: 3, InitialDelay: time.Second},
	}})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestBackoffLargestDelay: a policy whose delay is the largest Duration
// backs off within it rather than panicking inside Report.
func TestBackoffLargestDelay(t *testing.T) {
	p := opledger.RetryPolicy{MaxAttempts: 5, InitialDelay: math.MaxInt64}
	d := p.Backoff(1, 0)
	require.GreaterOrEqual(t, d, time.Duration(0))
}

// A policy's zero fields mean what RetryPolicy's doc says, not
// DefaultRetryPolicy's values: no initial delay is no backoff at all, and
// no MaxDelay is no cap.
func TestRetryPolicyZeroFields(t *testing.T) {
	t.Parallel()
	p := opledger.RetryPolicy{MaxAttempts: 10}
	for n := 1; n <= 5; n++ {
		require.Zero(t, p.Ceiling(n))
		require.Zero(t, p.Backoff(n, 0))
	}
	require.Equal(t, 3*time.Second, p.Backoff(1, 3*time.Second), "a Retry-After still applies")
	uncapped := opledger.RetryPolicy{MaxAttempts: 10, InitialDelay: time.Second}
	require.Equal(t, 1024*time.Second, uncapped.Ceiling(11))
}
