package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestOpsListAgeByServerClock: ops list's AGE, and workflows list's
// UPDATED, are measured against the ledger's clock (the list answer's
// now), not the clock of the machine the command runs on. The server's ledger clock here is six hours
// behind this machine's: one operation recorded two hours before the
// other is 2h old and the other 0s, through the API as on the store;
// by this machine's clock they would read 8h and 6h.
func TestOpsListAgeByServerClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "age.db")
	var offset atomic.Int64
	offset.Store(int64(-8 * time.Hour))
	l, err := opledger.Open(ctx, dsn, opledger.Options{
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:old", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	putWorkflow(t, l, "wf:old")
	offset.Store(int64(-6 * time.Hour))
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:new", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	putWorkflow(t, l, "wf:new")
	// wf:stuck's second step reads a member its first step's answer
	// lacks: advanced, it is stuck.
	_, _, err = l.PutWorkflow(ctx, "wf:stuck", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "wf:stuck/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:stuck/a", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
	_, err = l.AdvanceWorkflowOf(ctx, "wf:stuck/a")
	require.Error(t, err, "its next step cannot be filled")
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: time.Hour})

	out, errOut, code := run(t, "ops", "list", "--server", srv.URL(), "--token", token)
	require.Equal(t, 0, code, errOut)
	// Seconds at most: the command runs well within a minute of the
	// second record.
	require.Regexp(t, regexp.MustCompile(`(?m)^order:new\s+pending\s+crm\s+0\s+-\s+-\s+[0-9]+s\s+-$`), out)
	require.Regexp(t, regexp.MustCompile(`(?m)^order:old\s+pending\s+crm\s+0\s+-\s+-\s+2h\s+-$`), out)

	// workflows list's UPDATED likewise.
	out, errOut, code = run(t, "workflows", "list", "--server", srv.URL(), "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^wf:new\s.*\s[0-9]+s ago\s`), out)
	require.Regexp(t, regexp.MustCompile(`(?m)^wf:old\s.*\s2h ago\s`), out)
	out, errOut, code = run(t, "workflows", "list", "--stuck", "--server", srv.URL(), "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^wf:stuck\s+held\s.*\s[0-9]+s ago\s`), out)
}

// putWorkflow records a workflow of one step at key.
func putWorkflow(t *testing.T, l *opledger.Ledger, key string) {
	t.Helper()
	_, _, err := l.PutWorkflow(context.Background(), key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
}

// TestShowByServerClock: ops show's next decision (a retry not due yet)
// and events show's AGE are measured against the ledger's clock, not
// this machine's. The server's ledger clock is six hours behind: a
// retry scheduled an hour after its last attempt is five hours in the
// past by this machine's clock, and still to wait for by the ledger's.
func TestShowByServerClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, l, rules, ev := intakeLedger(t, opledger.Options{
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Hour, MaxDelay: time.Hour},
		Clock:       func(now time.Time) time.Time { return now.Add(-6 * time.Hour) }})
	_, err := l.ReceiveEvent(ctx, rules, ev)
	require.NoError(t, err)
	c, err := l.Claim(ctx, "intake:S1:mail", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "intake:S1:mail", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
	require.NoError(t, err)
	op, err := l.Get(ctx, "intake:S1:mail")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.NotNil(t, op.NotBefore)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: time.Hour})

	out, errOut, code := run(t, "ops", "show", "intake:S1:mail", "--server", srv.URL(), "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `next decision:\s+wait\n`, out)
	require.Contains(t, out, "retry scheduled, not before "+op.NotBefore.UTC().Format(time.RFC3339))

	out, errOut, code = run(t, "events", "show", "forms", "evt-1", "--server", srv.URL(), "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^intake:S1:mail\s+pending\s+mail\s+1\s+-\s+-\s+[0-9]+s\s+-$`), out)
}
