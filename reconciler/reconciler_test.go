package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const payload = `{"units": 2}`

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := reconciler.New(nil, reconciler.Config{})
	require.ErrorContains(t, err, "no destinations")
}

// A failing lookup backs off exponentially and ends in held; nothing is
// ever resent because of it.
func TestLookupFailuresBackOffThenHold(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Reconciler.MaxLookupFailures = 3
			o.Reconciler.LookupBackoff = 10 * time.Second
		})
		r.Record("intake:L1:create", "crm", payload)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.FailLookups(100)

		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		op := r.Get("intake:L1:create")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, 10*time.Second, op.NotBefore.Sub(op.UpdatedAt))
		require.Contains(t, r.Evidence("intake:L1:create", "reconcile deferred"), "lookup failed: lookup: GET")
		require.Contains(t, r.Evidence("intake:L1:create", "reconcile deferred"), "(failure 1 of 3)")
		require.Zero(t, r.Reconcile().Examined, "backing off")

		r.Clock.Advance(11 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		op = r.Get("intake:L1:create")
		require.Equal(t, 20*time.Second, op.NotBefore.Sub(op.UpdatedAt), "the backoff doubles")

		r.Clock.Advance(21 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Held])
		op = r.Get("intake:L1:create")
		require.Equal(t, opledger.StateHeld, op.State)
		require.NotNil(t, op.ReviewBy)
		require.Contains(t, r.Evidence("intake:L1:create", "held"), "3 lookups failed since the operation became uncertain; nothing was resent")
		require.Equal(t, 3, r.Server.Lookups())
		require.Nil(t, r.Step())
		require.Equal(t, 1, r.Server.Creates())
	})
}

// A lookup the destination throttles (429 with Retry-After) is not made
// again before the wait it asked for: the backoff's 10 s, 20 s, ... would
// have looked 7 times and held the operation within 22 minutes of a
// Retry-After of 10. It still counts as a failed lookup.
func TestThrottledLookupWaitsForRetryAfter(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Reconciler.MaxLookupFailures = 3
			o.Reconciler.LookupBackoff = 10 * time.Second
		})
		r.Record("intake:T1:create", "crm", payload)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.SetRetryAfter("600")
		r.Server.ThrottleLookups(100)
		r.Clock.Advance(31 * time.Second)

		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		op := r.Get("intake:T1:create")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, 600*time.Second, op.NotBefore.Sub(op.UpdatedAt), "the destination's Retry-After, not the 10 s backoff")
		evidence := r.Evidence("intake:T1:create", "reconcile deferred")
		require.Contains(t, evidence, "429 Too Many Requests")
		require.Contains(t, evidence, "(failure 1 of 3); the destination asked to wait 10m0s")

		r.Clock.Advance(5 * time.Minute)
		require.Zero(t, r.Reconcile().Examined, "not before the Retry-After")
		require.Equal(t, 1, r.Server.Lookups())

		r.Clock.Advance(5*time.Minute + time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		op = r.Get("intake:T1:create")
		require.Equal(t, 600*time.Second, op.NotBefore.Sub(op.UpdatedAt))
		require.Equal(t, 2, r.Server.Lookups())

		// Once the destination answers, the lookup settles it.
		r.Server.ThrottleLookups(0)
		r.Clock.Advance(10*time.Minute + time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Succeeded])
		require.Equal(t, 1, r.Server.Creates())
	})
}

// A throttled lookup's Retry-After of weeks is taken as MaxLookupWait:
// the operation is looked up again after a day, not left unexamined.
func TestThrottledLookupWaitIsBounded(t *testing.T) {
	t.Parallel()
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) {
		o.Reconciler.MaxLookupFailures = 3
	})
	r.Record("intake:T2:create", "crm", payload)
	r.Server.Fail(fakedest.LoseResponse)
	require.Equal(t, opledger.StateUncertain, r.Step().State)
	r.Server.SetRetryAfter(strconv.Itoa(int(30 * 24 * time.Hour / time.Second)))
	r.Server.ThrottleLookups(100)
	r.Clock.Advance(31 * time.Second)

	require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
	op := r.Get("intake:T2:create")
	require.Equal(t, reconciler.MaxLookupWait, op.NotBefore.Sub(op.UpdatedAt))
	require.Contains(t, r.Evidence("intake:T2:create", "reconcile deferred"),
		"(failure 1 of 3); the destination asked to wait 720h0m0s, waiting 24h0m0s")
	r.Clock.Advance(reconciler.MaxLookupWait + time.Second)
	require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
	require.Equal(t, 2, r.Server.Lookups(), "looked up again after a day")
}

// The failure count starts again each time the operation becomes
// uncertain.
func TestLookupFailuresCountPerUncertainSpell(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Reconciler.MaxLookupFailures = 2
			o.Reconciler.LookupBackoff = time.Second
		})
		r.Record("intake:L2:create", "crm", payload)
		r.Server.Fail(fakedest.DropBeforeCommit)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.FailLookups(1)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		r.Clock.Advance(31 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry], "absent after the delay")

		r.Server.Fail(fakedest.DropBeforeCommit)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.FailLookups(1)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait], "one failure in this spell, not two")
	})
}

// Absence counts from the last dispatch, not the first: an earlier attempt
// long ago must not make a fresh record's invisibility look like proof.
func TestVisibilityDelayCountsFromLastDispatch(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:V1:create", "crm", payload)
		r.Server.Fail(fakedest.Unavailable)
		require.Equal(t, opledger.StatePending, r.Step().State) // first dispatch
		r.Clock.Advance(time.Minute)                            // far beyond the 30 s delay

		r.Server.HideNew()
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State) // second dispatch: created, invisible
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait], "the second dispatch was just now")
		require.Equal(t, opledger.StateUncertain, r.Get("intake:V1:create").State)

		r.Server.Reveal()
		r.Clock.Advance(31 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Succeeded])
		require.Equal(t, 2, r.Server.Creates())
		require.Equal(t, 1, r.Server.Effects())
	})
}

// A destination with a unique external reference answers a duplicate
// create with 409: the record exists, so it is looked up, and a lookup that
// cannot see it proves nothing.
func TestConflictMeansExists(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		setup := func(t *testing.T) *testrig.Rig {
			r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Server.Unique = true })
			r.Record("ticket:T1:open", "tickets", payload)
			r.Server.HideNew()
			r.Server.Fail(fakedest.LoseResponse)
			require.Equal(t, opledger.StateUncertain, r.Step().State) // created, invisible
			require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
			r.Clock.Advance(31 * time.Second)
			require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry], "authoritatively absent, as far as the lookup knows")
			op := r.Step()
			require.Equal(t, opledger.StateUncertain, op.State, "409: exists, not rejected")
			require.Contains(t, op.LastError, "409 Conflict")
			return r
		}

		t.Run("Visible", func(t *testing.T) {
			r := setup(t)
			r.Server.Reveal()
			require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Succeeded])
			require.Equal(t, "R1", r.Get("ticket:T1:open").DestinationRef)
			require.Equal(t, 1, r.Server.Effects())
		})

		t.Run("NeverVisible", func(t *testing.T) {
			r := setup(t)
			require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait], "inside the visibility delay of the last dispatch")
			r.Clock.Advance(31 * time.Second)
			require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Held], "no retry loop against a record that exists")
			require.Contains(t, r.Evidence("ticket:T1:open", "cannot be decided automatically"), "absence proves nothing")
			require.Nil(t, r.Step())
			require.Equal(t, 2, r.Server.Creates())
			require.Equal(t, 1, r.Server.Effects())
		})
	})
}

// A 409 "exists" that arrives as a late report (after the lease expired)
// never becomes the operation's last error; it is on the attempt, and a
// lookup that cannot see the record still proves nothing.
func TestLateConflictMeansExists(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Server.Unique = true })
		const key = "ticket:T2:open"
		r.Record(key, "tickets", payload)
		c, err := r.Ledger.Claim(r.Ctx, key, opledger.ClaimOptions{Dispatch: true})
		require.NoError(t, err)
		r.Clock.Advance(time.Hour) // the worker is slow: its lease expires
		_, err = r.Ledger.ExpireLeases(r.Ctx)
		require.NoError(t, err)
		_, err = r.Ledger.Report(r.Ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain,
			Error: "POST tickets: 409 Conflict: " + destination.ErrExists.Error()})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op := r.Get(key)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.NotContains(t, op.LastError, "409", "a late report does not become the last error")

		r.Clock.Advance(time.Minute) // past the visibility delay; the record stays invisible
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Held], "no resend against a record the destination said exists")
		require.Contains(t, r.Evidence(key, "cannot be decided automatically"), "absence proves nothing")
	})
}

// A lookup that is not authoritative never proves absence.
func TestNonAuthoritativeLookupHolds(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:N1:create", "crm-search", payload)
		r.Server.Fail(fakedest.DropBeforeCommit)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		r.Clock.Advance(31 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Held])
		require.Nil(t, r.Step())
		require.Equal(t, 1, r.Server.Creates())
	})
}

// Proven absence past the retry policy's deadline fails the operation,
// exhausted, and the pass says so; nothing is sent again.
func TestProvenAbsencePastDeadlineFails(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:X1:create", "crm", payload)
		r.Server.Fail(fakedest.DropBeforeCommit)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		creates := r.Server.Creates()
		r.Clock.Advance(2 * time.Hour) // crm's deadline is 1h

		pass := r.Reconcile()
		require.Equal(t, map[reconciler.Decision]int{reconciler.Failed: 1}, pass.Decisions)
		op := r.Get("intake:X1:create")
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureExhausted, op.FailureKind)
		require.Contains(t, r.Evidence("intake:X1:create", "exhausted"), "authoritative lookup found nothing")
		require.Nil(t, r.Step())
		require.Equal(t, creates, r.Server.Creates(), "nothing sent again")
	})
}

// A record with other content is held for its owner, never overwritten.
func TestMismatchHolds(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:M1:create", "crm", payload)
		r.Server.Fail(fakedest.DropBeforeCommit)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.Put("intake:M1:create", map[string]any{"units": 5})

		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Held])
		op := r.Get("intake:M1:create")
		require.Equal(t, opledger.StateHeld, op.State)
		require.Contains(t, r.Evidence("intake:M1:create", "lookup found other content"), "differs from the intent at /units")
		require.Empty(t, op.DestinationRef)
	})
}

// An operation of a destination this reconciler does not know is left for
// whoever reconciles it: a pass does not take it from the store, and asked
// about it directly the reconciler looks at it again later.
func TestUnknownDestinationWaits(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("legacy:1", "legacy", `{}`)
		c, err := r.Ledger.Claim(r.Ctx, "legacy:1", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = r.Ledger.Dispatch(r.Ctx, "legacy:1", c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		_, err = r.Ledger.Report(r.Ctx, "legacy:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)

		pass := r.Reconcile()
		require.Zero(t, pass.Examined, "not this reconciler's destination")
		op := r.Get("legacy:1")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, op.StateSince, *op.NotBefore, "untouched by the pass: due since it became uncertain")

		d, err := r.Rec.Reconcile(r.Ctx, op)
		require.NoError(t, err)
		require.Equal(t, reconciler.Wait, d)
		op = r.Get("legacy:1")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, 10*time.Minute, op.NotBefore.Sub(op.UpdatedAt))
		require.Contains(t, r.Evidence("legacy:1", "reconcile deferred"), "not configured in this reconciler")
	})
}

// A reconciler limited to one tenant (an opledger proxy's, whose lookups
// carry its upstreams' credentials) never looks up for another tenant.
func TestTenantOnly(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Reconciler.Tenant = opledger.DefaultTenant })
		acme, err := r.Ledger.WithTenant("acme")
		require.NoError(t, err)
		_, _, err = acme.Record(r.Ctx, opledger.Intent{Key: "mail:T1", Action: "send", Destination: "email", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		c, err := acme.Claim(r.Ctx, "mail:T1", opledger.ClaimOptions{Dispatch: true})
		require.NoError(t, err)
		_, err = acme.Report(r.Ctx, "mail:T1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)
		r.Record("mail:T1", "email", `{}`)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)

		pass := r.Reconcile()
		require.Equal(t, 1, pass.Examined, "the default tenant's only")
		require.Equal(t, 1, pass.Decisions[reconciler.Held])
		require.Equal(t, opledger.StateHeld, r.Get("mail:T1").State)
		op, err := acme.Get(r.Ctx, "mail:T1")
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "acme's is left alone")

		_, err = r.Rec.Reconcile(r.Ctx, op)
		require.ErrorContains(t, err, "this reconciler looks up for tenant default only")
		op, err = acme.Get(r.Ctx, "mail:T1")
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, op.StateSince, *op.NotBefore, "untouched: due since it became uncertain")
	})
}

// A decision made elsewhere in the meantime wins.
func TestDecidedElsewhereIsSkipped(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("mail:D1", "email", `{}`)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		queue, err := r.Ledger.ReconcileQueue(r.Ctx, opledger.ReconcileQueueOptions{Limit: 10})
		require.NoError(t, err)
		require.Len(t, queue, 1)
		_, _, err = r.Ledger.Resolve(r.Ctx, "mail:D1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded,
			DestinationRef: "MSG-1", Reason: "seen in the provider's log"})
		require.NoError(t, err)
		d, err := r.Rec.Reconcile(r.Ctx, queue[0])
		require.NoError(t, err)
		require.Equal(t, reconciler.Skipped, d)
		require.Equal(t, opledger.StateSucceeded, r.Get("mail:D1").State)
	})
}

// A pass examines a batch concurrently; Run stops when its context ends.
func TestBatches(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Reconciler.BatchSize = 8 })
		for i := range 12 {
			key := fmt.Sprintf("mail:B%02d", i)
			r.Record(key, "email", `{}`)
			r.Server.Fail(fakedest.LoseResponse)
			require.Equal(t, opledger.StateUncertain, r.Step().State)
		}
		require.Equal(t, 8, r.Reconcile().Decisions[reconciler.Held])
		require.Equal(t, 4, r.Reconcile().Decisions[reconciler.Held])
		require.Zero(t, r.Reconcile().Examined)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, r.Rec.Run(ctx))
	})
}

// TestWorkflowAdvancesOnReconciledSuccess: a workflow step settled by a
// lookup leads to the next step at once, without the server's periodic
// sweep (which the rig does not run).
func TestWorkflowAdvancesOnReconciledSuccess(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		_, _, err := r.Ledger.PutWorkflow(r.Ctx, "wf:W2", opledger.WorkflowSpec{Owner: "ops-team", Steps: []opledger.WorkflowStep{
			{Name: "create", Action: "create", Destination: "crm", Payload: json.RawMessage(payload)},
			{Name: "notify", Action: "send", Destination: "email", Payload: json.RawMessage(`{"record":"{steps.create.ref}"}`)},
		}})
		require.NoError(t, err)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Succeeded])
		op := r.Step()
		require.NotNil(t, op, "the next step was recorded when the lookup settled the first")
		require.Equal(t, "wf:W2/notify", op.Key)
		require.Equal(t, opledger.StateSucceeded, op.State)
	})
}

// slowLookupCRM has an authoritative lookup and no other protection. Its
// calls follow plan ("none": no effect, answer lost; "lost": effect,
// answer lost; else an answered create), and its first lookup reads the
// records, then waits for release: a lookup that is slow to answer.
type slowLookupCRM struct {
	mu      sync.Mutex
	records []string
	plan    []string
	calls   int
	lookups atomic.Int32
	looked  chan struct{}
	release chan struct{}
}

func (d *slowLookupCRM) Name() string { return "crm" }

func (d *slowLookupCRM) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}

func (d *slowLookupCRM) Call(_ context.Context, _ opledger.Call) (opledger.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	step := ""
	if d.calls <= len(d.plan) {
		step = d.plan[d.calls-1]
	}
	ref := fmt.Sprintf("R%d", d.calls)
	switch step {
	case "none":
		return opledger.Result{}, opledger.Uncertain(errors.New("timeout, nothing done"))
	case "lost":
		d.records = append(d.records, ref)
		return opledger.Result{}, opledger.Uncertain(errors.New("answer lost"))
	}
	d.records = append(d.records, ref)
	return opledger.Result{Ref: ref}, nil
}

func (d *slowLookupCRM) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	d.mu.Lock()
	seen := slices.Clone(d.records)
	d.mu.Unlock()
	if d.lookups.Add(1) == 1 {
		close(d.looked)
		<-d.release
	}
	if len(seen) == 0 {
		return destination.LookupResult{Evidence: "no record"}, nil
	}
	return destination.LookupResult{Found: true, Matches: true, Ref: seen[0]}, nil
}

// A lookup that answers after another attempt was sent speaks only for
// the attempts before it: its "nothing there" must not release a third
// send while the second attempt's effect is unknown. Two reconcilers
// (one per process, as docs/scaling.md recommends) race on one operation.
func TestStaleLookupDecidesNothing(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		l, err := opledger.Open(ctx, newDSN(t), opledger.Options{})
		require.NoError(t, err)
		defer l.Close()
		crm := &slowLookupCRM{plan: []string{"none", "lost"}, looked: make(chan struct{}), release: make(chan struct{})}
		set, err := destination.NewSet(crm)
		require.NoError(t, err)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		slow, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: quiet})
		require.NoError(t, err)
		quick, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: quiet})
		require.NoError(t, err)
		in := opledger.Intent{Key: "intake:S1:create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(payload)}

		op, err := l.Do(ctx, in, crm.Call)
		require.Error(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		type result struct {
			d   reconciler.Decision
			err error
		}
		slowDone := make(chan result, 1)
		go func() {
			d, err := slow.Reconcile(ctx, op)
			slowDone <- result{d, err}
		}()
		<-crm.looked // the slow lookup has seen nothing

		// The slow lookup holds the operation's lookup lease
		// (ClaimLookup): the quick one reads it anew, as a process would
		// once that lease ran out.
		op, err = l.Get(ctx, in.Key)
		require.NoError(t, err)
		d, err := quick.Reconcile(ctx, op)
		require.NoError(t, err)
		require.Equal(t, reconciler.Retry, d, "the quick lookup proves absence")
		op, err = l.Do(ctx, in, crm.Call) // attempt 2: created, answer lost
		require.Error(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)

		close(crm.release)
		got := <-slowDone
		require.NoError(t, got.err)
		require.Equal(t, reconciler.Skipped, got.d, "the slow lookup was made before attempt 2")
		op, err = l.Get(ctx, in.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "attempt 2's effect is still unknown: nothing released")

		d, err = quick.Reconcile(ctx, op)
		require.NoError(t, err)
		require.Equal(t, reconciler.Succeeded, d, "a fresh lookup finds attempt 2's record")
		require.Equal(t, []string{"R2"}, crm.records, "one effect")
	})
}

// blockingLookup is a Go destination whose calls end uncertain and whose
// lookups fail: the first once released, having said it began (entered).
type blockingLookup struct {
	entered, release chan struct{}
	lookups          atomic.Int32
}

func (*blockingLookup) Name() string { return "blocking" }
func (*blockingLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (*blockingLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *blockingLookup) Lookup(ctx context.Context, _ *opledger.Operation, _ []string) (destination.LookupResult, error) {
	if d.lookups.Add(1) == 1 {
		d.entered <- struct{}{}
		<-d.release
	}
	return destination.LookupResult{}, errors.New("503 Service Unavailable")
}

// TestOneLookupAtATime: reconcilers of two processes sharing a store do
// not both look an operation up. Each used to make its own lookup and
// count its own failure, so one outage round used a failure of the
// operation's limit per process, and several processes held operations
// after one short outage. The second finds the operation taken, whether
// it read it before the first took it or after.
func TestOneLookupAtATime(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		dsn := newDSN(t)
		d := &blockingLookup{entered: make(chan struct{}, 2), release: make(chan struct{})}
		set, err := destination.NewSet(d)
		require.NoError(t, err)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		recs := make([]*reconciler.Reconciler, 2)
		ledgers := make([]*opledger.Ledger, 2)
		for i := range recs {
			l, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			ledgers[i] = l
			recs[i], err = reconciler.New(l, reconciler.Config{Destinations: set, Logger: quiet, MaxLookupFailures: 3})
			require.NoError(t, err)
		}
		in := opledger.Intent{Key: "intake:T1:create", Action: "create", Destination: "blocking", Payload: json.RawMessage(`{}`)}
		op, err := ledgers[0].Do(ctx, in, d.Call)
		require.Error(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)

		first := make(chan reconciler.Pass, 1)
		go func() {
			pass, err := recs[0].RunOnce(ctx)
			assert.NoError(t, err)
			first <- pass
		}()
		<-d.entered // the first process is looking
		// The second read the operation before the first took it...
		decision, err := recs[1].Reconcile(ctx, op)
		require.NoError(t, err)
		require.Equal(t, reconciler.Skipped, decision)
		// ... or reads its queue now.
		pass, err := recs[1].RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, pass.Decisions[reconciler.Wait]+pass.Decisions[reconciler.Held])
		close(d.release)
		require.Equal(t, 1, (<-first).Decisions[reconciler.Wait])
		require.Equal(t, int32(1), d.lookups.Load(), "one lookup")
		tl, err := ledgers[0].Timeline(ctx, in.Key)
		require.NoError(t, err)
		deferred := 0
		for _, e := range tl {
			if e.Event == "reconcile deferred" {
				deferred++
				require.Contains(t, e.Evidence, "(failure 1 of 3)")
			}
		}
		require.Equal(t, 1, deferred, "one failure counted")
	})
}
