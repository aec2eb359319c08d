package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

func doIntent(key string) opledger.Intent {
	return opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"submission":"847"}`)}
}

// When the store fails after the action ran, Do's error carries what the
// action returned and the report to send again: the reference of an
// effect that exists is not lost.
func TestDoReportFailureKeepsResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)

	op, err := l.Do(ctx, doIntent("k1"), func(context.Context, opledger.Call) (opledger.Result, error) {
		require.NoError(t, l.Close()) // the store goes away while the call runs
		return opledger.Result{Ref: "H42", Response: json.RawMessage(`{"id":"H42"}`)}, nil
	})
	require.Nil(t, op)
	var re *opledger.ReportError
	require.True(t, errors.As(err, &re), "%v", err)
	require.Equal(t, "H42", re.Result.Ref)
	require.Equal(t, opledger.OutcomeSucceeded, re.Report.Outcome)
	require.Equal(t, "H42", re.Report.DestinationRef)
	require.NoError(t, re.ActionErr)
	require.Contains(t, err.Error(), `"H42"`)

	// Once the store answers again, the report is sent as the error says.
	l2, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l2.Close()) })
	stuck, err := l2.Get(ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateInProgress, stuck.State)
	op, err = l2.Report(ctx, re.Key, re.AttemptID, re.FencingToken, re.Report)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "H42", op.DestinationRef)
	require.JSONEq(t, `{"id":"H42"}`, string(op.Response))
}

// The error Do returns when the store fails after the action ran is
// meant for a log: it masks the values of the intent's sensitive fields,
// in the action's error and in the reference it quotes, while its Result
// and Report keep the real ones to send again.
func TestDoReportFailureMasksSensitiveValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "ana.silva@example.invalid"
	in := doIntent("k1")
	in.Payload = json.RawMessage(`{"to":"` + secret + `"}`)
	in.SensitiveFields = []string{"to"}
	for _, answer := range []struct {
		res opledger.Result
		err error
	}{
		{res: opledger.Result{Ref: "<m1." + secret + ">"}},
		{err: opledger.Rejected(errors.New("422 invalid address " + secret))},
	} {
		l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
		require.NoError(t, err)
		_, err = l.Do(ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
			require.NoError(t, l.Close()) // the store goes away while the call runs
			return answer.res, answer.err
		})
		var re *opledger.ReportError
		require.True(t, errors.As(err, &re), "%v", err)
		require.NotContains(t, err.Error(), secret)
		require.Contains(t, err.Error(), "***")
		require.Equal(t, answer.res.Ref, re.Result.Ref, "the real reference, to send again")
		require.Equal(t, answer.res.Ref, re.Report.DestinationRef)
	}
}

// TestDoReportFailureMasksRefQuote: a success whose reference the ledger
// cannot store, when the store fails too, returns a *ReportError whose
// text quotes the start of the reference in the action's error: the
// values of sensitive fields are masked in the whole reference before
// the quote is cut, so none is logged in part.
func TestDoReportFailureMasksRefQuote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "ana.maria.silva@example.invalid"
	in := doIntent("k1")
	in.Payload = json.RawMessage(`{"to":"` + secret + `"}`)
	in.SensitiveFields = []string{"to"}
	ref := "https://crm.example/contacts/" + strings.Repeat("c", 20) + "?to=" + secret + "&" + strings.Repeat("y", 200)
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	_, err = l.Do(ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
		require.NoError(t, l.Close()) // the store goes away while the call runs
		return opledger.Result{Ref: ref}, nil
	})
	var re *opledger.ReportError
	require.True(t, errors.As(err, &re), "%v", err)
	require.Contains(t, err.Error(), "cannot be stored")
	require.NotContains(t, err.Error(), "ana.m", "no part of the value")
	require.Contains(t, err.Error(), "?to=***")
	require.Equal(t, ref, re.Result.Ref, "the real reference, to send again")
}

// TestDoAttemptErrorMasksRefQuote: a success whose reference the ledger
// cannot store is recorded uncertain, and Do's *AttemptError quotes the
// start of the reference: its text masks the values of sensitive fields
// in the whole reference before the quote is cut, as the ledger does, so
// that a log of the error holds no part of one. Err stays the action's
// own, and the values of the action's own error text are masked too.
func TestDoAttemptErrorMasksRefQuote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "ana.maria.silva@example.invalid"
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	prefix := "https://crm.example/contacts/" + strings.Repeat("c", 20) + "?to=" // the value starts at byte 53
	for i, ref := range []string{
		prefix + secret + "&" + strings.Repeat("y", 200), // too long
		prefix + secret + "&x=\x00",                      // not text
	} {
		in := doIntent(fmt.Sprintf("quote:%d", i))
		in.Payload = json.RawMessage(`{"to":"` + secret + `"}`)
		in.SensitiveFields = []string{"to"}
		op, err := l.Do(ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{Ref: ref}, nil
		})
		var ae *opledger.AttemptError
		require.ErrorAs(t, err, &ae, "answer %d", i)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Contains(t, err.Error(), "cannot be stored", "answer %d", i)
		require.Contains(t, err.Error(), `"`+prefix+"***", "answer %d: the value is masked in the quote", i)
		require.NotContains(t, err.Error(), "ana.m", "answer %d: no part of the value", i)
	}

	in := doIntent("quote:own")
	in.Payload = json.RawMessage(`{"to":"` + secret + `"}`)
	in.SensitiveFields = []string{"to"}
	actErr := opledger.Uncertain(errors.New("timeout sending to " + secret))
	_, err = l.Do(ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
		return opledger.Result{}, actErr
	})
	require.EqualError(t, err, "quote:own: attempt uncertain, operation is uncertain: timeout sending to ***")
	require.ErrorIs(t, err, actErr, "Err is the action's own error")
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name  string
		err   error
		want  opledger.Outcome
		after time.Duration
	}{
		{"negative Retry-After", opledger.Retryable(errors.New("429"), -3*time.Second), opledger.OutcomeRetryable, 0},
		{"nil marks", opledger.Rejected(nil), opledger.OutcomeRejected, 0},
		{"dial", fmt.Errorf("post: %w", dial), opledger.OutcomeRetryable, 0},
		{"proxyconnect", &url.Error{Op: "Post", URL: "https://crm.example", Err: &net.OpError{Op: "proxyconnect", Net: "tcp", Err: dial}}, opledger.OutcomeRetryable, 0},
		{"proxyconnect TLS handshake with the proxy", &net.OpError{Op: "proxyconnect", Net: "tcp",
			Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}}, opledger.OutcomeRetryable, 0},
		{"read wrapping a dial", &net.OpError{Op: "read", Net: "tcp", Err: dial}, opledger.OutcomeUncertain, 0},
		{"socks connect", &net.OpError{Op: "socks connect", Net: "tcp", Err: errors.New("general failure")}, opledger.OutcomeUncertain, 0},
		{"DNS", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "crm.example"}}, opledger.OutcomeRetryable, 0},
		{"outer mark decides", opledger.Retryable(fmt.Errorf("x: %w", opledger.Uncertain(errors.New("y"))), time.Second), opledger.OutcomeRetryable, time.Second},
		{"mark over dial", fmt.Errorf("%w", opledger.Rejected(dial)), opledger.OutcomeRejected, 0},
		{"joined rejected, uncertain", errors.Join(opledger.Rejected(errors.New("a")), opledger.Uncertain(errors.New("b"))), opledger.OutcomeUncertain, 0},
		{"joined retryable, rejected", errors.Join(opledger.Retryable(errors.New("a"), 2*time.Second), opledger.Rejected(errors.New("b")),
			opledger.Retryable(errors.New("c"), 5*time.Second)), opledger.OutcomeRetryable, 5 * time.Second},
		{"joined rejected, unmarked", errors.Join(opledger.Rejected(errors.New("a")), errors.New("b")), opledger.OutcomeUncertain, 0},
		{"joined rejected, dial", errors.Join(opledger.Rejected(errors.New("a")), dial), opledger.OutcomeRetryable, 0},
		{"joined unmarked, dial", errors.Join(errors.New("a"), dial), opledger.OutcomeUncertain, 0},
		{"wrapped join", fmt.Errorf("crm: %w", errors.Join(opledger.Rejected(errors.New("a")), opledger.Uncertain(errors.New("b")))), opledger.OutcomeUncertain, 0},
		{"joined under a mark", opledger.Rejected(errors.Join(opledger.Uncertain(errors.New("a")), errors.New("b"))), opledger.OutcomeRejected, 0},
	} {
		got, after := opledger.OutcomeOf(tc.err)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.after, after, tc.name)
	}
	require.Equal(t, "rejected: no cause given", opledger.Rejected(nil).Error())
	require.Equal(t, "retryable: no cause given", opledger.Retryable(nil, 0).Error())
	require.Equal(t, "uncertain: no cause given", opledger.Uncertain(nil).Error())
}

// A real HTTP proxy that is down: net/http returns the failed dial to the
// proxy as an OpError "proxyconnect". Nothing was sent.
func TestOutcomeOfProxyDown(t *testing.T) {
	t.Parallel()
	proxy := &url.URL{Scheme: "http", Host: "127.0.0.1:18649"} // nothing listens there
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	for _, target := range []string{"http://127.0.0.1:18648/v1/records", "https://127.0.0.1:18648/v1/records"} {
		resp, err := client.Post(target, "application/json", strings.NewReader(`{}`))
		if resp != nil {
			resp.Body.Close()
		}
		require.ErrorContains(t, err, "proxyconnect", target)
		got, _ := opledger.OutcomeOf(err)
		require.Equal(t, opledger.OutcomeRetryable, got, "%v", err)
	}
}

func TestOpenRefusesUnusableWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, worker := range []string{strings.Repeat("w", 201), "worker\x00"} {
		l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{Worker: worker})
		if l != nil {
			l.Close()
		}
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "worker")
	}
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{Worker: strings.Repeat("w", 200)})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// A response that is not UTF-8 (a destination answering in Latin-1) is
// never kept: every answer that shows the operation would be JSON no
// strict reader takes. Report refuses it; Do records the success without
// it, as it does a response that is not JSON.
func TestResponseNotUTF8(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	latin1 := json.RawMessage("{\"name\":\"Jos\xe9\"}")
	require.True(t, json.Valid(latin1), "encoding/json takes it")

	in := doIntent("k1")
	c, err := l.Claim(ctx, "k1", opledger.ClaimOptions{Intent: &in, Dispatch: true})
	require.NoError(t, err)
	_, err = l.Report(ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1", Response: latin1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "UTF-8")

	op, err := l.Do(ctx, doIntent("k2"), func(context.Context, opledger.Call) (opledger.Result, error) {
		return opledger.Result{Ref: "R2", Response: latin1}, nil
	})
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "R2", op.DestinationRef)
	require.Empty(t, op.Response)
}

// TestDoRefusesNilAction: Do with a nil action is refused as invalid
// input before anything is recorded (it used to record, claim and
// dispatch, then panic, leaving uncertain an operation never sent).
func TestDoRefusesNilAction(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			op, err := l.Do(ctx, doIntent("nil-action:1"), nil)
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			require.ErrorContains(t, err, "an action is required")
			require.Nil(t, op)
			_, err = l.Get(ctx, "nil-action:1")
			require.ErrorIs(t, err, opledger.ErrNotFound, "nothing was recorded")
		})
	}
}

// Do's error says the attempt's outcome once: the action's error follows
// without the mark that classified it.
func TestDoErrorSaysOutcomeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	_, err = l.Do(ctx, doIntent("once:1"), func(context.Context, opledger.Call) (opledger.Result, error) {
		return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
	})
	var ae *opledger.AttemptError
	require.ErrorAs(t, err, &ae)
	require.EqualError(t, err, "once:1: attempt uncertain, operation is uncertain: timeout")
}

// A Ref an action returns with an error is kept on the attempt, never as
// the operation's reference; with a retryable error it makes the outcome
// uncertain (a retry could make the effect twice); one the ledger cannot
// store is left out and the error says so.
func TestDoRefWithErrorKeptOnAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for _, tc := range []struct {
		name, ref string
		err       error
		state     opledger.State
		note      string
	}{
		{"uncertain", "CRM-77", opledger.Uncertain(errors.New("made, upload timed out")), opledger.StateUncertain, ""},
		{"rejected", "CRM-77", opledger.Rejected(errors.New("made, then refused")), opledger.StateFailed, ""},
		{"retryable", "CRM-77", opledger.Retryable(errors.New("made as a draft, try again"), 0), opledger.StateUncertain,
			"not retried on its own: the destination reported a reference"},
		{"unstorable", "R\x001", opledger.Uncertain(errors.New("made, upload timed out")), opledger.StateUncertain,
			"the destination also reported a reference, not text the ledger can store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "ref-err:" + tc.name
			_, err := l.Do(ctx, doIntent(key), func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{Ref: tc.ref}, tc.err
			})
			require.ErrorIs(t, err, tc.err)
			op, err := l.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tc.state, op.State)
			require.Empty(t, op.DestinationRef, "not a confirmed effect")
			require.Contains(t, op.LastError, tc.note)
			attempts, err := l.Attempts(ctx, key)
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			want := tc.ref
			if tc.name == "unstorable" {
				want = ""
			}
			require.Equal(t, want, attempts[0].DestinationRef)
		})
	}
	stats, err := l.Stats(ctx, false)
	require.NoError(t, err)
	require.Zero(t, stats.ConfirmedEffects)
}

// ReportOf is what Do records: checked here without a ledger, for the
// texts and fields each kind of answer gives, and that the notes it adds
// to a destination's error survive the cut to the stored length.
func TestReportOf(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name     string
		res      opledger.Result
		err      error
		outcome  opledger.Outcome
		ref      string
		response string
		text     string
	}{
		{"success", opledger.Result{Ref: "R1", Response: json.RawMessage(`{"id":"R1"}`)}, nil,
			opledger.OutcomeSucceeded, "R1", `{"id":"R1"}`, ""},
		{"success with an answer that is not JSON", opledger.Result{Ref: "R1", Response: json.RawMessage(`{`)}, nil,
			opledger.OutcomeSucceeded, "R1", "", ""},
		{"success without a ref", opledger.Result{}, nil,
			opledger.OutcomeUncertain, "", "", "the call succeeded without a destination reference"},
		{"success with a ref of spaces only", opledger.Result{Ref: " \t"}, nil,
			opledger.OutcomeUncertain, "", "", "the call succeeded without a destination reference"},
		{"success with an unstorable ref", opledger.Result{Ref: "R\x001"}, nil,
			opledger.OutcomeUncertain, "", "", "its destination reference cannot be stored"},
		{"rejected keeps the answer", opledger.Result{Response: json.RawMessage(`{"error":"bad list"}`)},
			opledger.Rejected(errors.New("422 bad list")), opledger.OutcomeRejected, "", `{"error":"bad list"}`, "422 bad list"},
		{"retryable drops the answer", opledger.Result{Response: json.RawMessage(`{"error":"busy"}`)},
			opledger.Retryable(errors.New("503 busy"), time.Second), opledger.OutcomeRetryable, "", "", "503 busy"},
		{"retryable with a ref", opledger.Result{Ref: "R1"}, opledger.Retryable(errors.New("503 busy"), time.Second),
			opledger.OutcomeUncertain, "R1", "", "503 busy; not retried on its own"},
		{"a long error keeps its notes", opledger.Result{Ref: "R\x001"}, opledger.Retryable(errors.New(long), 0),
			opledger.OutcomeUncertain, "", "",
			"; the destination also reported a reference, not text the ledger can store; not retried on its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := opledger.ReportOf(tc.res, tc.err)
			require.Equal(t, tc.outcome, r.Outcome)
			require.Equal(t, tc.ref, r.DestinationRef)
			require.Equal(t, tc.response, string(r.Response))
			require.Contains(t, r.Error, tc.text)
			require.NotContains(t, r.Error, "retryable:", "without the classification mark")
			require.LessOrEqual(t, len(r.Error), 1000, "within what the ledger stores")
			if tc.outcome != opledger.OutcomeRetryable {
				require.Zero(t, r.RetryAfter)
			}
		})
	}
}

// The notes ReportOf adds to a long error are what the ledger stores, not
// cut away with the end of the destination's text.
func TestReportOfNotesSurviveTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, err = l.Do(ctx, doIntent("ref-err:long"), func(context.Context, opledger.Call) (opledger.Result, error) {
		return opledger.Result{Ref: "CRM-77"}, opledger.Retryable(errors.New(strings.Repeat("busy ", 400)), 0)
	})
	require.Error(t, err)
	op, err := l.Get(ctx, "ref-err:long")
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	require.True(t, strings.HasPrefix(op.LastError, "busy busy"), op.LastError)
	require.True(t, strings.HasSuffix(op.LastError, "so it may have acted"), op.LastError)
}

// WithNote keeps the note whole and cuts the text before it to what the
// ledger keeps; only a note longer than that is cut itself.
func TestReportWithNote(t *testing.T) {
	t.Parallel()
	r := opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"}.WithNote(" (call cancelled: stopping)")
	require.Equal(t, "timeout (call cancelled: stopping)", r.Error)
	require.Equal(t, opledger.OutcomeUncertain, r.Outcome)

	long := opledger.Report{Error: strings.Repeat("é", 600)}.WithNote(" (call cancelled: stopping)")
	require.Len(t, long.Error, 999, "cut to 1,000 bytes without splitting a character")
	require.True(t, utf8.ValidString(long.Error))
	require.True(t, strings.HasSuffix(long.Error, "é (call cancelled: stopping)"), long.Error)

	require.Len(t, opledger.Report{Error: "x"}.WithNote(strings.Repeat("n", 2000)).Error, 1000)
}

// ErrorText drops the classification marks wherever they are wrapped.
func TestErrorText(t *testing.T) {
	t.Parallel()
	require.Empty(t, opledger.ErrorText(nil))
	err := fmt.Errorf("call crm: %w", opledger.Retryable(fmt.Errorf("post: %w", opledger.Rejected(errors.New("422 bad list"))), 0))
	require.Equal(t, "call crm: post: 422 bad list", opledger.ErrorText(err))
	require.Equal(t, "503 busy", opledger.ErrorText(opledger.Retryable(errors.New("503 busy"), time.Second)))
}
