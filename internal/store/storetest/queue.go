package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testClaimNext checks the work-queue claim: due order, destination and
// tenant filters, and that concurrent workers never take the same operation.
func testClaimNext(t *testing.T, h Harness) {
	t.Run("OrderAndFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue)

		for i, dest := range []string{"crm", "email", "crm"} {
			in := intent(fmt.Sprintf("q%d", i))
			in.Destination = dest
			_, _, err := b.ledger.Record(b.ctx, in)
			require.NoError(t, err)
			b.clock.Advance(time.Millisecond)
		}
		acme, err := b.ledger.WithTenant("acme")
		require.NoError(t, err)
		_, _, err = acme.Record(b.ctx, intent("acme1"))
		require.NoError(t, err)

		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{Destinations: []string{"email"}})
		require.NoError(t, err)
		require.Equal(t, "q1", c.Operation.Key)
		c, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, "q0", c.Operation.Key, "oldest due first")
		c, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, "q2", c.Operation.Key)
		_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "other tenants are not ours")
		c, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{AllTenants: true})
		require.NoError(t, err)
		require.Equal(t, "acme", c.Operation.Tenant)

		// Not yet due operations wait.
		_, _, err = b.ledger.Record(b.ctx, intent("later"))
		require.NoError(t, err)
		cl, err := b.ledger.Claim(b.ctx, "later", opledger.ClaimOptions{})
		require.NoError(t, err)
		b.report(t, "later", cl, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "429", RetryAfter: time.Hour})
		_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue)
		b.clock.Advance(2 * time.Hour)
		c, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, "later", c.Operation.Key)
	})

	// An operation due again (its backoff passed, its claim given back,
	// its content approved) is not passed over for one recorded after it
	// became due: ClaimNext takes the one due the longest.
	t.Run("DueLongestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.Record(b.ctx, intent("retried"))
		require.NoError(t, err)
		c, err := b.ledger.Claim(b.ctx, "retried", opledger.ClaimOptions{})
		require.NoError(t, err)
		b.report(t, "retried", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "429", RetryAfter: time.Second})
		approve := intent("approved")
		approve.RequiresApproval = true
		op, _, err := b.ledger.Record(b.ctx, approve)
		require.NoError(t, err)
		_, _, err = b.ledger.Approve(b.ctx, "approved", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "ana"})
		require.NoError(t, err)
		b.clock.Advance(time.Minute)
		for i := range 3 {
			_, _, err := b.ledger.Record(b.ctx, intent(fmt.Sprintf("new%d", i)))
			require.NoError(t, err)
			b.clock.Advance(time.Millisecond)
		}
		var order []string
		for range 5 {
			c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
			require.NoError(t, err)
			order = append(order, c.Operation.Key)
		}
		require.Equal(t, []string{"approved", "retried", "new0", "new1", "new2"}, order)
	})

	// ClaimNext with Dispatch: the same as ClaimNext, then Dispatch.
	t.Run("WithDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.Record(b.ctx, intent("next"))
		require.NoError(t, err)
		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{Dispatch: true})
		require.NoError(t, err)
		require.Equal(t, "next", c.Operation.Key)
		require.True(t, c.Operation.Dispatched)
		op := b.requireState(t, "next", opledger.StateInProgress)
		require.True(t, op.Dispatched, "read back")
		require.Equal(t, []string{"recorded", "claimed", "dispatched"}, b.events(t, "next"))
		attempts, err := b.ledger.Attempts(b.ctx, "next")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.NotNil(t, attempts[0].DispatchedAt)
		// Interrupted: uncertain when the lease expires, never pending.
		b.clock.Advance(11 * time.Second)
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.requireState(t, "next", opledger.StateUncertain)
	})

	// Skip leaves the operations it names out, of the Ledger's tenant
	// ("") or another, and takes the next due one.
	t.Run("Skip", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, key := range []string{"s0", "s1", "s2"} {
			_, _, err := b.ledger.Record(b.ctx, intent(key))
			require.NoError(t, err)
			b.clock.Advance(time.Millisecond)
		}
		acme, err := b.ledger.WithTenant("acme")
		require.NoError(t, err)
		_, _, err = acme.Record(b.ctx, intent("s0"))
		require.NoError(t, err)
		skip := []opledger.OperationRef{{Key: "s0"}, {Tenant: "acme", Key: "s0"}, {Key: "s2"}}
		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{AllTenants: true, Skip: skip})
		require.NoError(t, err)
		require.Equal(t, "s1", c.Operation.Key, "the oldest due not skipped")
		_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{AllTenants: true, Skip: skip})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "the rest are skipped")
		b.requireState(t, "s0", opledger.StatePending)
		b.requireState(t, "s2", opledger.StatePending)
		c, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{AllTenants: true, Skip: []opledger.OperationRef{skip[0], skip[2]}})
		require.NoError(t, err)
		require.Equal(t, opledger.OperationRef{Tenant: "acme", Key: "s0"}, opledger.OperationRef{Tenant: c.Operation.Tenant, Key: c.Operation.Key})
	})

	t.Run("ConcurrentWorkers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const n, workers = 300, 8
		for i := range n {
			_, _, err := b.ledger.Record(b.ctx, intent(fmt.Sprintf("job:%03d", i)))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{Worker: fmt.Sprintf("w%d", w)})
					if errors.Is(err, opledger.ErrNothingDue) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					seen[c.Operation.Key]++
					mu.Unlock()
					if _, err := b.ledger.Report(b.ctx, c.Operation.Key, c.AttemptID, c.FencingToken,
						opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-" + c.Operation.Key}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, seen, n)
		for k, v := range seen {
			require.Equal(t, 1, v, "claims of %s", k)
		}
	})
}

func testReconcileQueue(t *testing.T, h Harness) {
	b := setup(t, h)
	b.inState(t, "u1", opledger.StateUncertain)
	b.clock.Advance(time.Millisecond)
	b.inState(t, "u2", opledger.StateUncertain)
	b.inState(t, "p1", opledger.StatePending)
	acme, err := b.ledger.WithTenant("acme")
	require.NoError(t, err)
	ab := &bundle{ctx: b.ctx, ledger: acme, clock: b.clock}
	ab.inState(t, "u3", opledger.StateUncertain)

	queue, err := b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10, AllTenants: true})
	require.NoError(t, err)
	var keys []string
	for _, op := range queue {
		keys = append(keys, op.Tenant+"/"+op.Key)
	}
	require.ElementsMatch(t, []string{"default/u1", "default/u2", "acme/u3"}, keys, "every tenant's uncertain work")
	// Without AllTenants, a ledger's own tenant's only (an opledger proxy's
	// reconciler, whose lookups carry its upstreams' credentials).
	own, err := b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"u1", "u2"}, opKeys(own), "the default tenant's")
	own, err = acme.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"u3"}, opKeys(own), "acme's")

	// An uncertain e-mail: a reconciler that knows only the CRM never sees
	// it, one that knows the e-mail provider sees only it.
	mail := intent("m1")
	mail.Destination = "email"
	_, _, err = b.ledger.Record(b.ctx, mail)
	require.NoError(t, err)
	c := b.claimDispatched(t, "m1")
	b.report(t, "m1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after write"})
	queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10, Destinations: []string{"crm"}, AllTenants: true})
	require.NoError(t, err)
	require.Len(t, queue, 3, "only the CRM's")
	queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10, Destinations: []string{"email", "sms"}})
	require.NoError(t, err)
	require.Len(t, queue, 1)
	require.Equal(t, "m1", queue[0].Key)
	_, _, err = b.ledger.Reconcile(b.ctx, "m1", opledger.Finding{Evidence: "no lookup"})
	require.NoError(t, err)

	op, err := b.ledger.DeferReconcile(b.ctx, "u1", time.Minute, "lookup: 502 from the CRM")
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	require.Contains(t, b.events(t, "u1"), "reconcile deferred")
	// The same deferral right after itself is not written again (the
	// store's last timeline entry says it is there); another reason is.
	deferrals := func() (n int) {
		for _, e := range b.events(t, "u1") {
			if e == "reconcile deferred" {
				n++
			}
		}
		return n
	}
	for _, why := range []string{"lookup: 502 from the CRM", "lookup: timeout"} {
		_, err = b.ledger.DeferReconcile(b.ctx, "u1", time.Minute, why)
		require.NoError(t, err)
	}
	require.Equal(t, 2, deferrals(), "the repeat kept out, the other reason written")
	queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10, AllTenants: true})
	require.NoError(t, err)
	require.Len(t, queue, 2, "u1 waits for its next check")
	b.clock.Advance(2 * time.Minute)
	queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10, AllTenants: true})
	require.NoError(t, err)
	require.Len(t, queue, 3)

	_, err = b.ledger.DeferReconcile(b.ctx, "p1", time.Minute, "x")
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	// Once decided, the next-check time no longer matters.
	op, _, err = b.ledger.Reconcile(b.ctx, "u1", opledger.Finding{Found: true, Matches: true, DestinationRef: "H1"})
	require.NoError(t, err)
	require.Nil(t, op.NotBefore)

	// Longest waiting first: an operation whose next check came due is
	// not passed over for one that became uncertain after it.
	_, err = b.ledger.DeferReconcile(b.ctx, "u2", time.Second, "lookup: 502 from the CRM")
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	b.inState(t, "u4", opledger.StateUncertain)
	queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"u2"}, opKeys(queue), "due for an hour, before one uncertain since now")
	queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"u2", "u4"}, opKeys(queue))
}

func testTokens(t *testing.T, h Harness) {
	b := setup(t, h)
	acme, err := b.ledger.WithTenant("acme")
	require.NoError(t, err)
	secret, info, err := acme.CreateToken(b.ctx, "n8n", opledger.ReadWrite)
	require.NoError(t, err)
	require.Regexp(t, `^opl_[A-Za-z0-9_-]{43}$`, secret)
	require.Equal(t, "acme", info.Tenant)
	other, _, err := b.ledger.CreateToken(b.ctx, "", opledger.ReadWrite)
	require.NoError(t, err)
	require.NotEqual(t, secret, other)

	tok, err := b.ledger.Authenticate(b.ctx, secret)
	require.NoError(t, err)
	require.Equal(t, [3]string{info.ID, "acme", "n8n"}, [3]string{tok.ID, tok.Tenant, tok.Name}, "the token: its ID, tenant and name")
	_, err = b.ledger.Authenticate(b.ctx, secret+"x")
	require.ErrorIs(t, err, opledger.ErrUnauthorized)

	list, err := acme.Tokens(b.ctx, false)
	require.NoError(t, err)
	require.Len(t, list, 1)
	all, err := acme.Tokens(b.ctx, true)
	require.NoError(t, err)
	require.Len(t, all, 2)

	require.NoError(t, b.ledger.RevokeToken(b.ctx, info.ID))
	_, err = b.ledger.Authenticate(b.ctx, secret)
	require.ErrorIs(t, err, opledger.ErrUnauthorized, "revoked")
	require.ErrorIs(t, b.ledger.RevokeToken(b.ctx, info.ID), opledger.ErrNotFound, "already revoked")
	list, err = acme.Tokens(b.ctx, false)
	require.NoError(t, err)
	require.NotNil(t, list[0].RevokedAt)

	// A read-only or worker token keeps its access through every read of
	// it: its authentication, the list, and a console session signed in
	// with it.
	require.Equal(t, opledger.ReadWrite, tok.Access)
	require.True(t, tok.CanWrite() && tok.CanDecide())
	for i, access := range []opledger.TokenAccess{opledger.ReadOnly, opledger.Worker} {
		secret, info, err := acme.CreateToken(b.ctx, "as-"+access.String(), access)
		require.NoError(t, err)
		require.Equal(t, access, info.Access)
		tok, err := b.ledger.Authenticate(b.ctx, secret)
		require.NoError(t, err)
		require.Equal(t, access, tok.Access)
		require.Equal(t, [2]bool{access == opledger.Worker, false}, [2]bool{tok.CanWrite(), tok.CanDecide()}, access.String())
		list, err := acme.Tokens(b.ctx, false)
		require.NoError(t, err)
		require.Len(t, list, 2+i)
		require.Equal(t, [2]string{info.ID, access.String()}, [2]string{list[1+i].ID, list[1+i].Access.String()})
		session, _, err := b.ledger.OpenSession(b.ctx, secret, time.Hour)
		require.NoError(t, err)
		tok, err = b.ledger.SessionToken(b.ctx, session)
		require.NoError(t, err)
		require.Equal(t, [2]string{info.ID, access.String()}, [2]string{tok.ID, tok.Access.String()})
	}
	for _, access := range []opledger.TokenAccess{-1, 3} {
		_, _, err = acme.CreateToken(b.ctx, "x", access)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
	}

	// A token's last use: recorded by a console sign-in, written again
	// only once the one recorded is TokenUseResolution old. (Authenticate
	// writes it in the background: TestAuthenticateNotesUseInBackground.)
	cron, cronInfo, err := acme.CreateToken(b.ctx, "cron", opledger.ReadWrite)
	require.NoError(t, err)
	require.Nil(t, cronInfo.LastUsedAt, "never used")
	lastUsed := func() time.Time {
		t.Helper()
		list, err := acme.Tokens(b.ctx, false)
		require.NoError(t, err)
		for _, tok := range list {
			if tok.ID == cronInfo.ID {
				require.NotNil(t, tok.LastUsedAt, "used")
				return *tok.LastUsedAt
			}
		}
		t.Fatalf("token %s not listed", cronInfo.ID)
		return time.Time{}
	}
	_, _, err = b.ledger.OpenSession(b.ctx, cron, time.Hour)
	require.NoError(t, err)
	first := lastUsed()
	now, err := b.ledger.Now(b.ctx)
	require.NoError(t, err)
	require.WithinDuration(t, now, first, time.Minute)
	b.clock.Advance(59 * time.Minute)
	_, _, err = b.ledger.OpenSession(b.ctx, cron, time.Hour)
	require.NoError(t, err)
	require.Equal(t, first, lastUsed(), "a use within the hour is not written again")
	b.clock.Advance(2 * time.Minute)
	_, _, err = b.ledger.OpenSession(b.ctx, cron, time.Hour)
	require.NoError(t, err)
	require.GreaterOrEqual(t, lastUsed().Sub(first), opledger.TokenUseResolution)
}

func testStats(t *testing.T, h Harness) {
	b := setup(t, h, func(o *opledger.Options) { o.Retention = 24 * time.Hour })
	b.inState(t, "s1", opledger.StateSucceeded)
	b.inState(t, "s2", opledger.StateSucceeded)
	b.inState(t, "f1", opledger.StateFailed)
	b.inState(t, "h1", opledger.StateHeld)
	b.inState(t, "u1", opledger.StateUncertain)
	b.inState(t, "p1", opledger.StatePending)
	b.inState(t, "i1", opledger.StateInProgress)
	acme, err := b.ledger.WithTenant("acme")
	require.NoError(t, err)
	(&bundle{ctx: b.ctx, ledger: acme, clock: b.clock}).inState(t, "x", opledger.StateSucceeded)

	b.clock.Advance(10 * time.Minute)
	_, _, err = b.ledger.Resolve(b.ctx, "h1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "H1", Reason: "found it"})
	require.NoError(t, err)

	st, err := b.ledger.Stats(b.ctx, false)
	require.NoError(t, err)
	require.Equal(t, 3, st.ConfirmedEffects) // s1, s2, h1
	require.Equal(t, 1, st.Unresolved)       // u1
	require.Equal(t, 1, st.OperationsByState[opledger.StatePending])
	require.Equal(t, 0, st.OperationsByState[opledger.StateAwaitingApproval], "every state listed")
	require.Contains(t, st.OperationsByState, opledger.StateAwaitingApproval)
	// Stores may count the succeeded operations as the rest of the
	// tenant's, and list them by another index than the other states.
	byState := map[opledger.State]int{opledger.StateSucceeded: 3, opledger.StateFailed: 1, opledger.StateUncertain: 1,
		opledger.StatePending: 1, opledger.StateInProgress: 1}
	counts, err := b.ledger.CountByState(b.ctx)
	require.NoError(t, err)
	require.Equal(t, byState, counts)
	for state, n := range st.OperationsByState {
		require.Equal(t, byState[state], n, "Stats of %s", state)
	}
	for _, tc := range []struct {
		states []opledger.State
		keys   []string
	}{
		{[]opledger.State{opledger.StateSucceeded}, []string{"s1", "s2", "h1"}},
		{[]opledger.State{opledger.StatePending, opledger.StateSucceeded}, []string{"s1", "s2", "h1", "p1"}},
		{[]opledger.State{opledger.StateInProgress, opledger.StateFailed, opledger.StateUncertain}, []string{"f1", "u1", "i1"}},
	} {
		var keys []string
		opts := opledger.ListOptions{States: tc.states, Limit: 2}
		for {
			page, err := b.ledger.List(b.ctx, opts)
			require.NoError(t, err)
			for _, op := range page.Items {
				keys = append(keys, op.Key)
			}
			if page.NextCursor == "" {
				break
			}
			opts.Cursor = page.NextCursor
		}
		require.ElementsMatch(t, tc.keys, keys, "list of %v, page after page", tc.states)
	}
	require.Equal(t, 6, st.AttemptsTotal, "s1 s2 f1 h1 u1 i1")
	for _, a := range st.Attempts {
		require.Equal(t, intent("any").Destination, a.Destination, "attempts count under their operation's destination: %+v", a)
	}
	mail := intent("m1")
	mail.Destination = "email"
	_, _, err = b.ledger.Record(b.ctx, mail)
	require.NoError(t, err)
	c, err := b.ledger.Claim(b.ctx, "m1", opledger.ClaimOptions{})
	require.NoError(t, err)
	b.report(t, "m1", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "M1"})
	st, err = b.ledger.Stats(b.ctx, false)
	require.NoError(t, err)
	require.Contains(t, st.Attempts, opledger.AttemptCount{Destination: "email", Outcome: "succeeded", Count: 1})
	require.Equal(t, 7, st.AttemptsTotal)
	require.Equal(t, 4, st.ConfirmedEffects)
	require.Equal(t, 1, st.Recoveries)
	require.InDelta(t, 600, st.RecoveryMeanSeconds, 1)
	require.InDelta(t, 600, st.RecoveryP90Seconds, 1)
	require.Equal(t, []int{0, 0, 1, 1, 1, 1, 1}, st.RecoveryBuckets)

	all, err := b.ledger.Stats(b.ctx, true)
	require.NoError(t, err)
	require.Equal(t, 5, all.ConfirmedEffects)

	// Compaction keeps the totals.
	b.clock.Advance(48 * time.Hour)
	res, err := b.ledger.Compact(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 6, res.Tombstoned) // s1 s2 f1 h1 m1 and acme's x
	after, err := b.ledger.Stats(b.ctx, false)
	require.NoError(t, err)
	require.Equal(t, st.ConfirmedEffects, after.ConfirmedEffects)
	require.Equal(t, st.AttemptsTotal, after.AttemptsTotal)
	require.Equal(t, st.Attempts, after.Attempts)
	require.Equal(t, st.Recoveries, after.Recoveries)

	// So does forgetting the tombstones: the totals never go down.
	b.clock.Advance(opledger.DefaultTombstoneRetention + 24*time.Hour)
	res, err = b.ledger.Compact(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 6, res.Forgotten)
	forgotten, err := b.ledger.Stats(b.ctx, false)
	require.NoError(t, err)
	require.Equal(t, st.ConfirmedEffects, forgotten.ConfirmedEffects)
	require.Equal(t, st.Attempts, forgotten.Attempts)
	allForgotten, err := b.ledger.Stats(b.ctx, true)
	require.NoError(t, err)
	require.Equal(t, all.ConfirmedEffects, allForgotten.ConfirmedEffects, "every tenant's")
}
