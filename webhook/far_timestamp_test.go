package webhook_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/webhook"
)

// TestTimestampFarFromNow: a sender that signs with a timestamp in
// milliseconds (a common slip) or otherwise centuries away, with the
// right secret, is refused as stale with a detail that says how far and
// that t is in seconds. The age overflowed time.Duration: the detail read
// "signed -2562047h47m16.854775808s in the future".
func TestTimestampFarFromNow(t *testing.T) {
	t.Parallel()
	v := stripeVerifier(t)
	for name, tc := range map[string]struct {
		at   time.Time
		want string
	}{
		"Milliseconds": {time.Unix(now.UnixMilli(), 0), "signed more than 292 years in the future"},
		"FarPast":      {time.Unix(-now.Unix()*100, 0), "signed more than 292 years ago"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(header(webhook.StripeHeader, webhook.SignStripe(secret, tc.at, body)), body)
			require.ErrorIs(t, err, webhook.ErrStaleSignature)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "tolerance 5m0s: t="+strconv.FormatInt(tc.at.Unix(), 10)+" must be in seconds since 1970")
			require.NotContains(t, err.Error(), "2562047h", "no overflowed age")
		})
	}
	// A near one keeps its age.
	err := v.Verify(http.Header{webhook.StripeHeader: {webhook.SignStripe(secret, now.Add(-2*time.Hour), body)}}, body)
	require.ErrorContains(t, err, "signed 2h0m0s ago, tolerance 5m0s")
}
