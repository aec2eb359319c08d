package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

func testRecord(t *testing.T, h Harness) {
	t.Run("NewIsPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op, created, err := b.ledger.Record(b.ctx, intent("intake:I17:create"))
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, opledger.StatePending, op.State)
		require.EqualValues(t, 1, op.Version)
		require.Equal(t, "default", op.Tenant)
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, op.Fingerprint)
		require.Equal(t, []string{"recorded"}, b.events(t, "intake:I17:create"))
	})

	t.Run("RepeatReturnsStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		first, _, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		in := intent("k1")
		in.Payload = json.RawMessage(`{ "units": 2.0, "submission": "S-847" }`) // same content, other spelling
		again, created, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, first.Fingerprint, again.Fingerprint)
		require.Equal(t, first.CreatedAt, again.CreatedAt)
		require.Len(t, b.events(t, "k1"), 1, "a repeat writes nothing")
	})

	t.Run("OtherContentRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		first, _, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		in := intent("k1")
		in.Payload = json.RawMessage(`{"submission":"S-847","units":3}`)
		_, _, err = b.ledger.Record(b.ctx, in)
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		var me *opledger.MismatchError
		require.True(t, errors.As(err, &me))
		require.Equal(t, first.Fingerprint, me.Stored)
		require.NotEqual(t, me.Stored, me.Given)
		stored, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		require.JSONEq(t, string(first.Payload), string(stored.Payload), "original kept")
		require.Equal(t, first.UpdatedAt, stored.UpdatedAt)

		// Another action, destination or version is other content too.
		for _, change := range []func(*opledger.Intent){
			func(i *opledger.Intent) { i.Action = "crm.update" },
			func(i *opledger.Intent) { i.Destination = "erp" },
			func(i *opledger.Intent) { i.Version = 2 },
		} {
			in := intent("k1")
			change(&in)
			_, _, err := b.ledger.Record(b.ctx, in)
			require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		}

		// So is a number a double cannot tell from the one recorded.
		big := opledger.Intent{Key: "k2", Action: "bank.transfer", Destination: "bank", Payload: json.RawMessage(`{"to_account":9007199254740993}`)}
		_, _, err = b.ledger.Record(b.ctx, big)
		require.NoError(t, err)
		big.Payload = json.RawMessage(`{"to_account":9007199254740992}`)
		_, _, err = b.ledger.Record(b.ctx, big)
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		stored, err = b.ledger.Get(b.ctx, "k2")
		require.NoError(t, err)
		require.Contains(t, string(stored.Payload), "9007199254740993", "the number as recorded, exactly")
	})

	t.Run("ApprovalRequired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op := b.inState(t, "k1", opledger.StateAwaitingApproval)
		require.Equal(t, opledger.StateAwaitingApproval, op.State)
	})

	// A repeat names the owner the first recording left out: it is kept;
	// one naming another owner does not reassign it.
	t.Run("RepeatNamesOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		in.Owner = ""
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		in.Owner = "crm-team"
		op, created, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, "crm-team", op.Owner)
		require.Contains(t, b.events(t, "k1"), "owner named")
		in.Owner = "someone-else"
		op, _, err = b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		require.Equal(t, "crm-team", op.Owner, "not reassigned by a repeat")
		op = b.requireState(t, "k1", opledger.StatePending)
		require.Equal(t, "crm-team", op.Owner)
	})

	t.Run("RepeatRequiringApproval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		strict := intent("k1")
		strict.RequiresApproval = true
		op, created, err := b.ledger.Record(b.ctx, strict)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, opledger.StateAwaitingApproval, op.State, "nothing was sent: it waits for the approval asked for")
		require.True(t, op.RequiresApproval)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		op, _, err = b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, op.State, "a repeat never weakens what was recorded")
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		b.requireState(t, "k1", opledger.StatePending)

		// Once sent, it is too late: the repeat shows what was recorded.
		b.dispatched(t, "k2")
		strict = intent("k2")
		strict.RequiresApproval = true
		op, _, err = b.ledger.Record(b.ctx, strict)
		require.NoError(t, err)
		require.Equal(t, opledger.StateInProgress, op.State)
		require.False(t, op.RequiresApproval)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		cases := map[string]func(*opledger.Intent){
			"email key":   func(i *opledger.Intent) { i.Key = "customer:ana@example.com" },
			"empty key":   func(i *opledger.Intent) { i.Key = "" },
			"space":       func(i *opledger.Intent) { i.Key = "a b" },
			"no action":   func(i *opledger.Intent) { i.Action = "" },
			"no dest":     func(i *opledger.Intent) { i.Destination = "" },
			"bad json":    func(i *opledger.Intent) { i.Payload = json.RawMessage(`{"a":`) },
			"neg version": func(i *opledger.Intent) { i.Version = -1 },
		}
		for name, change := range cases {
			in := intent("k1")
			change(&in)
			_, _, err := b.ledger.Record(b.ctx, in)
			require.Error(t, err, name)
			require.True(t, errors.Is(err, opledger.ErrInvalidKey) || errors.Is(err, opledger.ErrInvalidInput), "%s: %v", name, err)
		}
		_, _, err := b.ledger.Record(b.ctx, opledger.Intent{Key: "x@y", Action: "a", Destination: "d"})
		require.ErrorContains(t, err, "personal data")
		page, err := b.ledger.List(b.ctx, opledger.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, page.Items, "nothing recorded from bad input")
	})

	t.Run("SensitiveFieldsMasked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		in.Payload = json.RawMessage(`{"customer":{"email":"ana@example.com","name":"Ana"},"units":2}`)
		in.SensitiveFields = []string{"customer.email"}
		op, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		require.Contains(t, string(op.Payload), "ana@example.com", "stored in full")
		out, err := json.Marshal(op)
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana@example.com", "never shown")
		require.Contains(t, string(out), `"Ana"`)
		page, err := b.ledger.List(b.ctx, opledger.ListOptions{})
		require.NoError(t, err)
		out, err = json.Marshal(page)
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana@example.com")
	})

	// PostgreSQL's text takes neither NUL bytes nor invalid UTF-8: names
	// and reasons holding them are refused as bad input on every store,
	// and a report's error text is kept with them replaced (refusing it
	// would lose the outcome), cut without splitting a character.
	t.Run("TextAStoreCannotKeep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for name, change := range map[string]func(*opledger.Intent){
			"action":           func(i *opledger.Intent) { i.Action = "a\x00b" },
			"owner":            func(i *opledger.Intent) { i.Owner = "o\xff" },
			"sensitive_fields": func(i *opledger.Intent) { i.SensitiveFields = []string{"x\x00"} },
		} {
			in := intent("k-" + name)
			change(&in)
			_, _, err := b.ledger.Record(b.ctx, in)
			require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
			require.ErrorContains(t, err, name+" must be UTF-8 text without NUL bytes")
		}
		_, err := b.ledger.ReceiveEvent(b.ctx, nil, opledger.Event{Source: "s", EventID: "e1", Type: "t\x00", Payload: json.RawMessage(`{}`)})
		require.ErrorContains(t, err, "type must be UTF-8 text without NUL bytes")

		c := b.dispatched(t, "k1")
		_, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "x\x00y"})
		require.ErrorContains(t, err, "reason must be UTF-8 text without NUL bytes")
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R\x00"})
		require.ErrorContains(t, err, "destination_ref must be UTF-8 text without NUL bytes")
		long := "bad \x00 byte \xff, then " + strings.Repeat("é", 600) // 1,221 bytes
		op, err := b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: long})
		require.NoError(t, err, "the outcome is recorded")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.True(t, utf8.ValidString(op.LastError))
		require.LessOrEqual(t, len(op.LastError), 1000)
		require.True(t, strings.HasPrefix(op.LastError, "bad \uFFFD byte \uFFFD, then éé"), op.LastError[:30])
		op, err = b.ledger.Hold(b.ctx, "k1", "checked \x00 by hand")
		require.NoError(t, err)
		require.Equal(t, opledger.StateHeld, op.State)
	})

	// A repeat may mark a field the first recording forgot; a repeat that
	// names fewer unmasks nothing, and one that adds none writes nothing.
	t.Run("RepeatAddsSensitiveFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		in.Payload = json.RawMessage(`{"customer":{"email":"ana@example.com","phone":"555-0100"},"units":2}`)
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)

		in.SensitiveFields = []string{"customer.email", "customer.phone", "customer.email"}
		op, created, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, []string{"customer.email", "customer.phone"}, op.SensitiveFields)
		require.Equal(t, []string{"recorded", "sensitive fields added"}, b.events(t, "k1"))

		in.SensitiveFields = nil
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		require.Equal(t, []string{"customer.email", "customer.phone"}, c.Operation.SensitiveFields, "never unmasked")
		require.Equal(t, []string{"recorded", "sensitive fields added", "claimed"}, b.events(t, "k1"))
		page, err := b.ledger.List(b.ctx, opledger.ListOptions{})
		require.NoError(t, err)
		out, err := json.Marshal(page)
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana@example.com")
		require.NotContains(t, string(out), "555-0100")
	})
}

func testTenants(t *testing.T, h Harness) {
	b := setup(t, h)
	acme, err := b.ledger.WithTenant("acme")
	require.NoError(t, err)
	_, err = b.ledger.WithTenant("bad tenant")
	require.ErrorIs(t, err, opledger.ErrInvalidInput)

	_, _, err = acme.Record(b.ctx, intent("k1"))
	require.NoError(t, err)
	_, err = b.ledger.Get(b.ctx, "k1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "default tenant cannot see acme's key")
	_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
	require.ErrorIs(t, err, opledger.ErrNotFound)

	// The same key in another tenant is another operation, even with other content.
	in := intent("k1")
	in.Payload = json.RawMessage(`{"other":true}`)
	op, created, err := b.ledger.Record(b.ctx, in)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "default", op.Tenant)
	require.NotEqual(t, op.IdempotencyKey(), opledger.DestinationIdempotencyKey("acme", "k1", 1))
	page, err := acme.List(b.ctx, opledger.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, "acme", page.Items[0].Tenant)
}
