package destination_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
)

// largeBody is large enough that the request is still being written
// when the server goes away.
var largeBody = bytes.Repeat([]byte("a"), 4<<20)

// TestSendHTTPFailedWriteMayHaveReached: a write that fails part way
// does not prove that the destination did nothing: a server may act on
// the part it read (the headers) before the body has arrived, and even
// answer. Such a failure is uncertain, never retryable (which would send
// the request again).
func TestSendHTTPFailedWriteMayHaveReached(t *testing.T) {
	t.Parallel()

	t.Run("ResetAfterActing", func(t *testing.T) {
		t.Parallel()
		dest := fakedest.NewHeaderActor(t, "")
		req, err := http.NewRequest(http.MethodPost, dest.URL()+"/records", bytes.NewReader(largeBody))
		require.NoError(t, err)
		resp, err := destination.SendHTTP(newClient(t), req, destination.HTTPPolicy{})
		require.Nil(t, resp)
		require.Equal(t, 1, dest.Acted())
		requireOutcome(t, err, opledger.OutcomeUncertain, true)
	})

	t.Run("HTTPCall", func(t *testing.T) {
		t.Parallel()
		dest := fakedest.NewHeaderActor(t, "")
		h := newHTTP(t, destination.HTTPConfig{Name: "files", URL: dest.URL() + "/files", Ref: "/id",
			Timeout: destination.Duration(time.Minute)}) // far above the call's time, even under load
		payload := `{"content":"` + string(largeBody) + `"}`
		_, err := h.Call(context.Background(), call(operation("upload:1", payload)))
		require.Equal(t, 1, dest.Acted())
		outcome, _ := opledger.OutcomeOf(err)
		require.Equal(t, opledger.OutcomeUncertain, outcome, "error: %v", err)
	})

	t.Run("AnsweredThenClosed", func(t *testing.T) {
		t.Parallel()
		// Whether net/http reports the answer or the failed write is a
		// race; neither may be retryable.
		dest := fakedest.NewHeaderActor(t, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"id\":\"A\"}")
		for i := range 20 {
			req, err := http.NewRequest(http.MethodPost, dest.URL()+"/records", bytes.NewReader(largeBody))
			require.NoError(t, err)
			resp, err := destination.SendHTTP(newClient(t), req, destination.HTTPPolicy{})
			require.Equal(t, i+1, dest.Acted())
			if resp != nil {
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, resp.StatusCode)
				require.NoError(t, resp.Body.Close())
				continue
			}
			requireOutcome(t, err, opledger.OutcomeUncertain, true)
		}
	})
}
