package lab_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/lab"
)

// A worker process's call follows no redirect, as a configured
// destination's does not: a 303 after the create is the answer to record
// (uncertain: the destination may have acted), not a GET of another
// resource whose answer would pass for the create's and confirm it.
func TestRunWorkerFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", "/records/elsewhere")
		w.WriteHeader(http.StatusSeeOther)
	})
	mux.HandleFunc("GET /records/elsewhere", func(w http.ResponseWriter, _ *http.Request) {
		followed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": "elsewhere-1"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	dsn := testdb.SQLiteDSN(t)
	in := &opledger.Intent{Key: lab.OperationKey, Action: "order.prepare", Destination: "lab-crm",
		Payload: []byte(`{"order": "` + lab.OrderRef + `", "units": 2}`), Owner: "lab"}
	var out bytes.Buffer
	err := lab.RunWorker(context.Background(), lab.WorkerArgs{DSN: dsn, Tenant: "lab", Intent: in, URL: srv.URL + "/records",
		Crash: lab.CrashAfterReport, ClockAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}, &out, strings.NewReader(""))
	require.ErrorContains(t, err, "was not killed", "the worker waits at its crash point until its input ends")
	require.Equal(t, "reached after_report\n", out.String())
	require.Zero(t, followed.Load(), "the redirect was followed")

	l, err := opledger.Open(context.Background(), dsn, opledger.Options{Tenant: "lab"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	op, err := l.Get(context.Background(), lab.OperationKey)
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	require.Empty(t, op.DestinationRef)
}
