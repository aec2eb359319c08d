package executor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// holdAnswer is a transport that, once the destination's answer has
// arrived, holds it until the call's context is cancelled: the answer
// came before Stop's deadline cancelled the call.
type holdAnswer struct {
	answered chan struct{}
}

func (h holdAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	close(h.answered)
	<-req.Context().Done()
	return resp, nil
}

// TestStopNotesOnlyCallsItCut: a destination that refused the call (a
// 422) before Stop's deadline cancelled it did not have its call cut: its
// attempt's error is the refusal alone, without "(call cancelled: …)".
func TestStopNotesOnlyCallsItCut(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"error": "bad"}`))
	}))
	t.Cleanup(srv.Close)
	tr := holdAnswer{answered: make(chan struct{})}
	dest, err := destination.NewHTTP(destination.HTTPConfig{Name: "refuser", URL: srv.URL + "/x", Ref: "/id", Timeout: destination.Duration(5 * time.Second)},
		destination.LoadOptions{Transport: tr})
	require.NoError(t, err)
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{dest} })
	r.Record("refuse:1", "refuser", `{}`)
	require.NoError(t, r.Exec.Start(r.Ctx))
	<-tr.answered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, r.Exec.Stop(ctx), context.Canceled)

	op := r.Get("refuse:1")
	require.Equal(t, opledger.StateFailed, op.State)
	require.Contains(t, op.LastError, "422 Unprocessable Entity")
	require.NotContains(t, op.LastError, "call cancelled", "the answer came before the cancel")
}
