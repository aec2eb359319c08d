package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testRules are the mapping rules the event tests use.
const testRules = `
rules:
  - name: intake-accepted
    source: forms
    type: submission.accepted
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create_inquiry
        destination: crm
        owner: intake-team
        payload:
          submission: "{data.submission_id}"
          units: "{data.units}"
          applicant: "{data.applicant}"
        sensitive_fields: [applicant.email]
  # Each payment notification is its own action, even for the same order.
  - name: order-paid
    source: shop
    type: orders/paid
    operations:
      - key: "shop:payment:{event.id}:receipt"
        action: email.send_receipt
        destination: email
        payload: {order: "{data.id}", amount: "{data.amount}"}
  # One sync operation per order; newer versions correct it.
  - name: order-updated
    source: shop
    type: orders/updated
    object: {kind: order, id: data.id, order_by: data.version}
    operations:
      - key: "shop:order:{data.id}:sync"
        action: erp.upsert_order
        destination: erp
        owner: erp-team
        payload: {order: "{data.id}", version: "{data.version}", lines: "{data.lines}"}
        update_key: "shop:order:{data.id}:update:v{data.version}"
        update_action: erp.update_order
  # The same, without a way to correct a dispatched operation.
  - name: ticket-updated
    source: desk
    type: ticket.updated
    object: {id: data.id, order_by: event.occurred_at}
    operations:
      - key: "desk:ticket:{data.id}:sync"
        action: crm.sync_ticket
        destination: crm
        payload: {ticket: "{data.id}", status: "{data.status}"}
`

func mustRules(t *testing.T) *opledger.Rules {
	t.Helper()
	r, err := opledger.ParseRules([]byte(testRules))
	require.NoError(t, err)
	return r
}

// submission is a submission.accepted event.
func submission(id, delivery, submissionID string, units int) opledger.Event {
	return opledger.Event{Source: "forms", EventID: id, DeliveryID: delivery, Type: "submission.accepted",
		Payload: json.RawMessage(fmt.Sprintf(`{"submission_id":%q,"units":%d,"applicant":{"name":"Ana","email":"ana@example.com"}}`, submissionID, units))}
}

// orderUpdate is an orders/updated event for order 1001.
func orderUpdate(id string, version int, lines string) opledger.Event {
	return opledger.Event{Source: "shop", EventID: id, Type: "orders/updated",
		Payload: json.RawMessage(fmt.Sprintf(`{"id":1001,"version":%d,"lines":%s}`, version, lines))}
}

// runOnce claims, dispatches and reports success for key; it returns the
// operation as claimed (the content that was sent).
func (b *bundle) runOnce(t *testing.T, key, ref string) *opledger.Operation {
	t.Helper()
	c := b.claimDispatched(t, key)
	b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: ref, Response: json.RawMessage(`{"id":"` + ref + `"}`)})
	return c.Operation
}

// revisedOrder receives version 1 of order 1001 and then version 2, which
// revises the operation version 1 recorded (not dispatched yet); it
// returns what version 2 did.
func (b *bundle) revisedOrder(t *testing.T, rules *opledger.Rules) *opledger.EventResult {
	t.Helper()
	_, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-1", 1, `[{"sku":"A","qty":2}]`))
	require.NoError(t, err)
	r, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-2", 2, `[{"sku":"A","qty":5}]`))
	require.NoError(t, err)
	return r
}

// drain runs every due operation once, each with its own effect, and
// returns the keys it ran.
func (b *bundle) drain(t *testing.T) []string {
	t.Helper()
	var keys []string
	for {
		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		if errors.Is(err, opledger.ErrNothingDue) {
			return keys
		}
		require.NoError(t, err)
		key := c.Operation.Key
		_, err = b.ledger.Dispatch(b.ctx, key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "REF-" + key})
		keys = append(keys, key)
	}
}

func opKeys(ops []*opledger.Operation) []string {
	out := []string{}
	for _, op := range ops {
		out = append(out, op.Key)
	}
	return out
}

func testEvents(t *testing.T, h Harness) {
	t.Run("DuplicateDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		const events = 10
		for i := range events {
			id := fmt.Sprintf("evt-%02d", i)
			sub := fmt.Sprintf("S-%02d", i)
			// Two deliveries at the same moment, then a late third one.
			var wg sync.WaitGroup
			results := make([]*opledger.EventResult, 3)
			errs := make([]error, 3)
			for d := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[d], errs[d] = b.ledger.ReceiveEvent(b.ctx, rules, submission(id, fmt.Sprintf("dlv-%d", d), sub, 2))
				}()
			}
			wg.Wait()
			results[2], errs[2] = b.ledger.ReceiveEvent(b.ctx, rules, submission(id, "dlv-2", sub, 2))
			firsts := 0
			for d, r := range results {
				require.NoError(t, errs[d])
				if !r.Duplicate {
					firsts++
				}
				require.Equal(t, opledger.EventApplied, r.Status)
				require.Equal(t, []string{"intake:" + sub + ":create"}, opKeys(r.Operations), "every delivery answers with the first one's operations")
			}
			require.Equal(t, 1, firsts, "one event, whatever the timing")
			require.True(t, results[2].Duplicate)
		}

		detail, err := b.ledger.GetEvent(b.ctx, "forms", "evt-00")
		require.NoError(t, err)
		require.Len(t, detail.Deliveries, 3)
		require.False(t, detail.Deliveries[0].Duplicate)
		require.True(t, detail.Deliveries[1].Duplicate)
		require.True(t, detail.Deliveries[2].Duplicate)
		require.Equal(t, "dlv-2", detail.Deliveries[2].DeliveryID)
		require.Equal(t, "forms:evt-00", detail.Operations[0].SourceEvent)
		out, err := json.Marshal(detail)
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana@example.com", "sensitive fields masked")

		page, err := b.ledger.List(b.ctx, opledger.ListOptions{})
		require.NoError(t, err)
		require.Len(t, page.Items, events, "one operation per event")
		ran := b.drain(t)
		require.Len(t, ran, events)

		// A delivery after the effect replays the saved result.
		again, err := b.ledger.ReceiveEvent(b.ctx, rules, submission("evt-00", "dlv-3", "S-00", 2))
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		require.Equal(t, opledger.StateSucceeded, again.Operations[0].State)
		require.Equal(t, "REF-intake:S-00:create", again.Operations[0].DestinationRef)

		es, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, events, es.Events)
		require.Equal(t, events, es.EventsByStatus[opledger.EventApplied])
		require.Equal(t, 3*events+1, es.Deliveries)
		require.Equal(t, 2*events+1, es.DuplicateDeliveries)
		st, err := b.ledger.Stats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, events, st.ConfirmedEffects, "one effect per event")
		require.Equal(t, events, st.AttemptsTotal)
	})

	t.Run("PayloadDiffersOnDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		first, err := b.ledger.ReceiveEvent(b.ctx, rules, submission("evt-1", "d1", "S-1", 2))
		require.NoError(t, err)
		require.False(t, first.Delivery.PayloadDiffers)
		other, err := b.ledger.ReceiveEvent(b.ctx, rules, submission("evt-1", "d2", "S-1", 9))
		require.NoError(t, err)
		require.True(t, other.Duplicate)
		require.True(t, other.Delivery.PayloadDiffers, "a body that changed under the same event id is flagged")
		op, err := b.ledger.Get(b.ctx, "intake:S-1:create")
		require.NoError(t, err)
		require.JSONEq(t, `{"submission":"S-1","units":2,"applicant":{"name":"Ana","email":"ana@example.com"}}`, string(op.Payload), "the first mapping stands")
	})

	t.Run("TwoEventIDsOneOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		// Two payments of one order: different event ids, both legitimate,
		// and the rule makes each its own operation.
		for _, id := range []string{"pay-1", "pay-2"} {
			r, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "shop", EventID: id, Type: "orders/paid",
				Payload: json.RawMessage(`{"id":1001,"amount":"49.00"}`)})
			require.NoError(t, err)
			require.False(t, r.Duplicate)
			require.Equal(t, []string{"shop:payment:" + id + ":receipt"}, opKeys(r.Operations))
		}
		require.ElementsMatch(t, []string{"shop:payment:pay-1:receipt", "shop:payment:pay-2:receipt"}, b.drain(t), "both executed")

		// Two update notifications with different ids but the same version
		// and content: this rule maps both to one operation.
		for _, id := range []string{"upd-a", "upd-b"} {
			r, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate(id, 1, `[{"sku":"A","qty":2}]`))
			require.NoError(t, err)
			require.False(t, r.Duplicate, "a different event id is a different event")
			require.Equal(t, opledger.EventApplied, r.Status)
			require.Equal(t, []string{"shop:order:1001:sync"}, opKeys(r.Operations))
		}
		require.Equal(t, []string{"shop:order:1001:sync"}, b.drain(t))
		es, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 4, es.Events)
		require.Zero(t, es.DuplicateDeliveries)
	})

	t.Run("OutOfOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		v2, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-2", 2, `[{"sku":"A","qty":3}]`))
		require.NoError(t, err)
		require.Equal(t, opledger.EventApplied, v2.Status)
		require.Equal(t, "order:1001", v2.Event.ObjectKey)
		require.Equal(t, "2", v2.Event.OrderValue)

		v1, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-1", 1, `[{"sku":"A","qty":2}]`))
		require.NoError(t, err)
		require.False(t, v1.Duplicate)
		require.True(t, v1.OutOfOrder)
		require.Equal(t, opledger.EventOutOfOrder, v1.Status)
		require.Contains(t, v1.Reason, "upd-2")
		require.Empty(t, v1.Operations, "not applied")
		op, err := b.ledger.Get(b.ctx, "shop:order:1001:sync")
		require.NoError(t, err)
		require.EqualValues(t, 1, op.Version)
		require.JSONEq(t, `{"order":1001,"version":2,"lines":[{"sku":"A","qty":3}]}`, string(op.Payload), "the newer content stays")
		require.Equal(t, opledger.StatePending, op.State)

		// A repeat of the late event is a duplicate, still flagged.
		again, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-1", 1, `[{"sku":"A","qty":2}]`))
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		require.True(t, again.OutOfOrder)

		page, err := b.ledger.ListEvents(b.ctx, opledger.EventListOptions{Status: opledger.EventOutOfOrder})
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		require.Equal(t, "upd-1", page.Items[0].EventID)
		require.True(t, page.Items[0].OutOfOrder)
		es, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 1, es.EventsByStatus[opledger.EventOutOfOrder])
	})

	// Versions of a new object arriving at once: on PostgreSQL the events
	// plan concurrently, each finding neither the object nor its
	// operation, and all but the first to commit find both when they
	// write. None may be refused: each is planned again, applied (a
	// revision) or out of order, and the newest version's content wins.
	t.Run("ConcurrentVersionsOfNewObject", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		const versions = 6
		for round := range 8 {
			var wg sync.WaitGroup
			results := make([]*opledger.EventResult, versions)
			errs := make([]error, versions)
			for v := range versions {
				wg.Go(func() {
					results[v], errs[v] = b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "shop", EventID: fmt.Sprintf("r%d-v%d", round, v+1),
						Type: "orders/updated", Payload: json.RawMessage(fmt.Sprintf(`{"id":"R%d","version":%d,"lines":[]}`, round, v+1))})
				})
			}
			wg.Wait()
			for v := range versions {
				require.NoError(t, errs[v], "round %d, version %d", round, v+1)
				require.Contains(t, []opledger.EventStatus{opledger.EventApplied, opledger.EventOutOfOrder}, results[v].Status)
			}
			op, err := b.ledger.Get(b.ctx, fmt.Sprintf("shop:order:R%d:sync", round))
			require.NoError(t, err)
			require.JSONEq(t, fmt.Sprintf(`{"order":"R%d","version":%d,"lines":[]}`, round, versions), string(op.Payload), "round %d", round)
		}
		es, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 8*versions, es.Events, "every event recorded")
	})

	// A rule that starts marking a field sensitive: an event with the same
	// content adds it to the operation an earlier event recorded.
	t.Run("SameContentAddsSensitiveFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		without, err := opledger.ParseRules([]byte(strings.Replace(testRules, "sensitive_fields: [applicant.email]", "", 1)))
		require.NoError(t, err)
		_, err = b.ledger.ReceiveEvent(b.ctx, without, submission("e1", "d1", "S1", 2))
		require.NoError(t, err)
		op, err := b.ledger.Get(b.ctx, "intake:S1:create")
		require.NoError(t, err)
		require.Empty(t, op.SensitiveFields)
		r, err := b.ledger.ReceiveEvent(b.ctx, mustRules(t), submission("e2", "d1", "S1", 2))
		require.NoError(t, err)
		require.Equal(t, opledger.EventApplied, r.Status)
		require.Equal(t, []string{"applicant.email"}, r.Operations[0].SensitiveFields)
		out, err := json.Marshal(r.Operations[0])
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana@example.com")
		require.Contains(t, b.events(t, "intake:S1:create"), "sensitive fields added")
	})

	// A rule that starts marking a field sensitive: a newer version that
	// revises the operation adds it too, so the revised content is masked
	// and the text written with the revision is scrubbed of its values.
	t.Run("CorrectionAddsSensitiveFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const rule = `
rules:
  - name: customer-updated
    source: shop
    type: customers/updated
    object: {kind: customer, id: data.id, order_by: data.version}
    operations:
      - key: "shop:customer:{data.id}:sync"
        action: crm.upsert_customer
        destination: crm
        payload: {customer: {ref: "{data.ref}", email: "{data.email}"}, version: "{data.version}"}
`
		without, err := opledger.ParseRules([]byte(rule))
		require.NoError(t, err)
		with, err := opledger.ParseRules([]byte(rule + "        sensitive_fields: [customer.email, customer.ref]\n"))
		require.NoError(t, err)
		customer := func(id string, version int, email string) opledger.Event {
			return opledger.Event{Source: "shop", EventID: id, Type: "customers/updated",
				Payload: json.RawMessage(fmt.Sprintf(`{"id":"C1","ref":"CR-4711","version":%d,"email":%q}`, version, email))}
		}
		_, err = b.ledger.ReceiveEvent(b.ctx, without, customer("c-1", 1, "ana@example.com"))
		require.NoError(t, err)
		r, err := b.ledger.ReceiveEvent(b.ctx, with, customer("c-2", 2, "ana.new@example.com"))
		require.NoError(t, err)
		require.Equal(t, opledger.EventApplied, r.Status, r.Reason)
		op := r.Operations[0]
		require.EqualValues(t, 2, op.Version, "revised")
		require.Equal(t, []string{"customer.email", "customer.ref"}, op.SensitiveFields)
		shown, err := json.Marshal(op)
		require.NoError(t, err)
		var masked struct{ Payload json.RawMessage }
		require.NoError(t, json.Unmarshal(shown, &masked))
		require.JSONEq(t, `{"customer":{"ref":"***","email":"***"},"version":2}`, string(masked.Payload), "the revised content is shown masked")
		got, err := b.ledger.Get(b.ctx, op.Key)
		require.NoError(t, err)
		tl, err := b.ledger.Timeline(b.ctx, op.Key)
		require.NoError(t, err)
		out, err := json.Marshal([]any{got, tl})
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana.new@example.com", "the revised content is masked")
		// The fields were added before the revision was written: its
		// text holds no value of theirs either. (An object id made of a
		// sensitive value is refused when the rules load.)
		require.NotContains(t, string(out), "CR-4711")
		require.Contains(t, b.events(t, op.Key), "sensitive fields added")
		require.Contains(t, b.events(t, op.Key), "revised")
		// The stored content is the real one, for the destination.
		_, _, err = b.ledger.Approve(b.ctx, op.Key, opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		sent := b.runOnce(t, op.Key, "CRM-1")
		require.JSONEq(t, `{"customer":{"ref":"CR-4711","email":"ana.new@example.com"},"version":2}`, string(sent.Payload))
	})

	// The ordering value is stored as text: one PostgreSQL cannot hold (a
	// NUL byte) is refused as a mapping failure on both stores, naming the
	// field, and nothing is recorded.
	t.Run("UnstorableOrderValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// No key holds the version, so nothing but the order checks it.
		rules, err := opledger.ParseRules([]byte(`
rules:
  - name: order-updated
    type: orders/updated
    object: {kind: order, id: data.id, order_by: data.version}
    operations:
      - {key: "shop:order:{data.id}:sync", action: erp.upsert_order, destination: erp, payload: {order: "{data.id}"}}
`))
		require.NoError(t, err)
		for _, tc := range []struct{ payload, field string }{
			{`{"id":"1","version":"a\u0000"}`, "object.order_by"},
			{`{"id":"1\u0000","version":1}`, "object.id"},
		} {
			payload := tc.payload
			_, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "shop", EventID: "upd-1", Type: "orders/updated",
				Payload: json.RawMessage(payload)})
			require.ErrorIs(t, err, opledger.ErrInvalidInput, payload)
			var re *opledger.RuleError
			require.True(t, errors.As(err, &re), "%s: %v", payload, err)
			require.Equal(t, "order-updated", re.Rule)
			require.Equal(t, tc.field, re.Field, payload)
		}
		es, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Zero(t, es.Events, "nothing recorded")
		require.Zero(t, es.Deliveries)
		r, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "shop", EventID: "upd-1", Type: "orders/updated",
			Payload: json.RawMessage(`{"id":"1","version":"a"}`)})
		require.NoError(t, err, "the same event with a usable value is taken")
		require.Equal(t, "a", r.Event.OrderValue)
	})

	// The values of one object are compared only with values of the kind
	// first recorded for it: after "abc", a real version 11 compared as
	// text and was out of order, forever. One of another kind is refused
	// as a mapping failure, naming the path and the kinds, and nothing
	// is recorded; values of one kind compare as before.
	t.Run("OrderValueKinds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules, err := opledger.ParseRules([]byte(`
rules:
  - name: order-updated
    type: orders/updated
    object: {kind: order, id: data.id, order_by: data.version}
    operations:
      - {key: "shop:order:{data.id}:sync", action: erp.upsert_order, destination: erp, payload: {order: "{data.id}", version: "{data.version}"}}
`))
		require.NoError(t, err)
		n := 0
		receive := func(id, version string) (*opledger.EventResult, error) {
			n++
			return b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "shop", EventID: fmt.Sprintf("upd-%d", n), Type: "orders/updated",
				Payload: json.RawMessage(`{"id":"` + id + `","version":` + version + `}`)})
		}
		applied := func(id, version string, want opledger.EventStatus) {
			t.Helper()
			res, err := receive(id, version)
			require.NoError(t, err, "%s %s", id, version)
			require.Equal(t, want, res.Status, "%s %s: %s", id, version, res.Reason)
		}
		refused := func(id, version, want string) {
			t.Helper()
			before, err := b.ledger.EventStats(b.ctx, false)
			require.NoError(t, err)
			_, err = receive(id, version)
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "%s %s", id, version)
			var re *opledger.RuleError
			require.True(t, errors.As(err, &re), "%s %s: %v", id, version, err)
			require.Equal(t, "order-updated", re.Rule)
			require.Equal(t, "object.order_by", re.Field)
			require.EqualError(t, err, `rule "order-updated": object.order_by: `+want)
			_, err = b.ledger.GetEvent(b.ctx, "shop", fmt.Sprintf("upd-%d", n))
			require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")
			after, err := b.ledger.EventStats(b.ctx, false)
			require.NoError(t, err)
			require.Equal(t, before, after, "nothing recorded")
		}
		const must = ": values of one object must all be numbers, all RFC 3339 times or all other text"

		// Text first: a number is refused, not out of order.
		applied("1", `"abc"`, opledger.EventApplied)
		refused("1", `11`, "data.version is a number, but the ordering value recorded for this object is other text"+must)
		refused("1", `"99999"`, "data.version is a number, but the ordering value recorded for this object is other text"+must)
		refused("1", `"2026-03-01T10:00:00Z"`, "data.version is an RFC 3339 time, but the ordering value recorded for this object is other text"+must)
		applied("1", `"abd"`, opledger.EventApplied)
		applied("1", `"abc"`, opledger.EventOutOfOrder)

		// A number first: text and times are refused, numbers compare.
		applied("2", `10`, opledger.EventApplied)
		refused("2", `"abc"`, "data.version is other text, but the ordering value recorded for this object is a number"+must)
		refused("2", `"2026-03-01T10:00:00Z"`, "data.version is an RFC 3339 time, but the ordering value recorded for this object is a number"+must)
		applied("2", `9`, opledger.EventOutOfOrder)
		applied("2", `"1.1e1"`, opledger.EventApplied)
		applied("2", `10.5`, opledger.EventOutOfOrder)

		// A time first.
		applied("3", `"2026-03-01T10:00:00Z"`, opledger.EventApplied)
		refused("3", `5`, "data.version is a number, but the ordering value recorded for this object is an RFC 3339 time"+must)
		applied("3", `"2026-03-01T11:00:00+02:00"`, opledger.EventOutOfOrder)
		applied("3", `"2026-03-01T10:00:01Z"`, opledger.EventApplied)

		// Beyond a double's range: refused, even as the first value, so
		// it cannot stay newer than every real version.
		refused("4", `1.5e400`, "data.version is a number beyond the range of a double")
		refused("4", `"1e999999"`, "data.version is a number beyond the range of a double")
		applied("4", `1`, opledger.EventApplied)
		applied("4", `2`, opledger.EventApplied)

		// The forms big.Rat reads are numbers too, compared by value with
		// decimals whatever their exponents (as text, "3e1" was newer
		// than "0x1F").
		applied("5", `"0x1F"`, opledger.EventApplied)
		applied("5", `3e1`, opledger.EventOutOfOrder)
		applied("5", `"61/2"`, opledger.EventOutOfOrder)
		applied("5", `3.2e1`, opledger.EventApplied)
	})

	t.Run("CorrectionBeforeDispatchRevises", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		r := b.revisedOrder(t, rules)
		require.Equal(t, opledger.EventApplied, r.Status)
		require.Equal(t, []string{"shop:order:1001:sync"}, opKeys(r.Operations), "the same operation, revised")
		op := r.Operations[0]
		require.Equal(t, opledger.StateAwaitingApproval, op.State, "a revision waits for approval")
		require.EqualValues(t, 2, op.Version)
		require.JSONEq(t, `{"order":1001,"version":2,"lines":[{"sku":"A","qty":5}]}`, string(op.Payload))
		require.Contains(t, b.events(t, op.Key), "revised")
		_, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "not executable before approval")

		// A third version before approval revises again.
		r, err = b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-3", 3, `[{"sku":"A","qty":6}]`))
		require.NoError(t, err)
		op = r.Operations[0]
		require.EqualValues(t, 3, op.Version)
		_, _, err = b.ledger.Approve(b.ctx, op.Key, opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lea"})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch, "approve exactly the current version")
		_, _, err = b.ledger.Approve(b.ctx, op.Key, opledger.Approval{Version: 3, Fingerprint: op.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		sent := b.runOnce(t, op.Key, "ERP-1")
		require.JSONEq(t, `{"order":1001,"version":3,"lines":[{"sku":"A","qty":6}]}`, string(sent.Payload), "the approved content is executed")
	})

	// A second notification of a version an operation was revised to, after
	// the operation was compacted: its tombstone keeps the version its
	// fingerprint covers, so the content is recognised, not a conflict.
	t.Run("SameVersionAfterCompaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		op := b.revisedOrder(t, rules).Operations[0]
		require.EqualValues(t, 2, op.Version)
		_, _, err := b.ledger.Approve(b.ctx, op.Key, opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		b.runOnce(t, op.Key, "ERP-1")
		b.clock.Advance(31 * 24 * time.Hour)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned)

		again, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-2b", 2, `[{"sku":"A","qty":5}]`))
		require.NoError(t, err)
		require.Equal(t, opledger.EventApplied, again.Status, again.Reason)
		require.Len(t, again.Operations, 1)
		require.True(t, again.Operations[0].Tombstoned)
		require.EqualValues(t, 2, again.Operations[0].Version, "the tombstone keeps the version")
		require.Equal(t, "ERP-1", again.Operations[0].DestinationRef)
	})

	t.Run("CorrectionAfterDispatchNeedsApprovedUpdate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		_, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-1", 1, `[{"sku":"A","qty":2}]`))
		require.NoError(t, err)
		b.runOnce(t, "shop:order:1001:sync", "ERP-1")

		r, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-2", 2, `[{"sku":"A","qty":5}]`))
		require.NoError(t, err)
		require.Equal(t, opledger.EventApplied, r.Status)
		require.Equal(t, []string{"shop:order:1001:update:v2"}, opKeys(r.Operations))
		up := r.Operations[0]
		require.Equal(t, opledger.StateAwaitingApproval, up.State)
		require.Equal(t, "erp.update_order", up.Action)
		require.Equal(t, "erp-team", up.Owner)
		require.JSONEq(t, `{"order":1001,"version":2,"lines":[{"sku":"A","qty":5}]}`, string(up.Payload))
		orig, err := b.ledger.Get(b.ctx, "shop:order:1001:sync")
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, orig.State, "the dispatched original is never changed")
		require.EqualValues(t, 1, orig.Version)

		// The same correction under another event id maps to the same update.
		r, err = b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate("upd-2b", 2, `[{"sku":"A","qty":5}]`))
		require.NoError(t, err)
		require.Equal(t, []string{"shop:order:1001:update:v2"}, opKeys(r.Operations))

		_, _, err = b.ledger.Approve(b.ctx, up.Key, opledger.Approval{Version: up.Version, Fingerprint: up.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		require.Equal(t, []string{"shop:order:1001:update:v2"}, b.drain(t))

		// Without an update_key the correction is recorded as a conflict
		// for a person, never dropped.
		t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		ticket := func(id, status string, at time.Time) opledger.Event {
			return opledger.Event{Source: "desk", EventID: id, Type: "ticket.updated", OccurredAt: at,
				Payload: json.RawMessage(`{"id":"T7","status":"` + status + `"}`)}
		}
		_, err = b.ledger.ReceiveEvent(b.ctx, rules, ticket("tk-1", "open", t0))
		require.NoError(t, err)
		b.runOnce(t, "desk:ticket:T7:sync", "CRM-T7")
		c, err := b.ledger.ReceiveEvent(b.ctx, rules, ticket("tk-2", "closed", t0.Add(time.Hour)))
		require.NoError(t, err)
		require.Equal(t, opledger.EventConflict, c.Status)
		require.Contains(t, c.Reason, "update_key")
		require.Empty(t, c.Operations)
		page, err := b.ledger.ListEvents(b.ctx, opledger.EventListOptions{Status: opledger.EventConflict})
		require.NoError(t, err)
		require.Len(t, page.Items, 1, "visible for a person")
		// Out of order by occurred_at.
		late, err := b.ledger.ReceiveEvent(b.ctx, rules, ticket("tk-0", "new", t0.Add(-time.Hour)))
		require.NoError(t, err)
		require.True(t, late.OutOfOrder)
	})

	t.Run("NewerCorrectionWithdrawsWaitingOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		receive := func(id string, version int) *opledger.EventResult {
			t.Helper()
			r, err := b.ledger.ReceiveEvent(b.ctx, rules, orderUpdate(id, version, fmt.Sprintf(`[{"sku":"A","qty":%d}]`, version)))
			require.NoError(t, err)
			require.Equal(t, opledger.EventApplied, r.Status, r.Reason)
			return r
		}
		update := func(v int) string { return fmt.Sprintf("shop:order:1001:update:v%d", v) }
		get := func(key string) *opledger.Operation {
			t.Helper()
			op, err := b.ledger.Get(b.ctx, key)
			require.NoError(t, err)
			return op
		}
		approve := func(key string) error {
			op := get(key)
			_, _, err := b.ledger.Approve(b.ctx, key, opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lea"})
			return err
		}
		receive("upd-1", 1)
		b.runOnce(t, "shop:order:1001:sync", "ERP-1")
		require.Empty(t, receive("upd-2", 2).Reason, "nothing waiting to withdraw")

		// Version 3 withdraws version 2's correction, still awaiting
		// approval: approved after version 3's, it would send older lines.
		r := receive("upd-3", 3)
		require.Equal(t, []string{update(3)}, opKeys(r.Operations))
		require.Contains(t, r.Reason, "withdrew the correction "+update(2)+" of event upd-2")
		v2 := get(update(2))
		require.Equal(t, opledger.StateFailed, v2.State)
		require.Equal(t, opledger.FailureCancelled, v2.FailureKind)
		tl, err := b.ledger.Timeline(b.ctx, update(2))
		require.NoError(t, err)
		last := tl[len(tl)-1]
		require.Equal(t, "withdrawn", last.Event)
		require.Equal(t, "event:shop:upd-3", last.Actor)
		require.Contains(t, last.Evidence, "event upd-3 applies a newer version of order:1001 (order 3)")
		require.ErrorIs(t, approve(update(2)), opledger.ErrInvalidState, "a withdrawn correction cannot be approved")
		detail, err := b.ledger.GetEvent(b.ctx, "shop", "upd-3")
		require.NoError(t, err)
		require.Equal(t, r.Reason, detail.Event.Reason, "the event says what it withdrew")

		// Approved but not sent yet, version 3's is withdrawn by version 4's.
		require.NoError(t, approve(update(3)))
		receive("upd-4", 4)
		require.Equal(t, opledger.StateFailed, get(update(3)).State)
		require.Equal(t, opledger.StateAwaitingApproval, get(update(4)).State)

		// Once claimed and dispatched, a correction may have reached the
		// destination: version 5 leaves it as it is.
		require.NoError(t, approve(update(4)))
		c := b.claimDispatched(t, update(4))
		r = receive("upd-5", 5)
		require.Empty(t, r.Reason)
		require.Equal(t, opledger.StateInProgress, get(update(4)).State)
		b.report(t, update(4), c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ERP-4"})
		require.NoError(t, approve(update(5)))
		require.Equal(t, []string{update(5)}, b.drain(t), "only the newest correction left to send")
	})

	t.Run("ConflictWithoutOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		_, err := b.ledger.ReceiveEvent(b.ctx, rules, submission("evt-1", "", "S-1", 2))
		require.NoError(t, err)
		r, err := b.ledger.ReceiveEvent(b.ctx, rules, submission("evt-2", "", "S-1", 3))
		require.NoError(t, err)
		require.False(t, r.Duplicate)
		require.Equal(t, opledger.EventConflict, r.Status)
		require.Contains(t, r.Reason, "intake:S-1:create")
		require.Empty(t, r.Event.OperationKeys)
		op, err := b.ledger.Get(b.ctx, "intake:S-1:create")
		require.NoError(t, err)
		require.Contains(t, string(op.Payload), `"units":2`, "original kept")
		require.Len(t, b.events(t, op.Key), 1, "nothing written to the operation")
	})

	// An operation recorded on its own, then an event for an object no
	// event has tracked yet, whose rule writes that key with other
	// content: the event checks again (EventObjectExists) that no event
	// tracked the object meanwhile, and is a conflict for a person.
	t.Run("ConflictWithoutEarlierEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		_, _, err := b.ledger.Record(b.ctx, opledger.Intent{Key: "desk:ticket:T9:sync", Action: "crm.sync_ticket", Destination: "crm",
			Payload: json.RawMessage(`{"ticket":"T9","status":"recorded by hand"}`)})
		require.NoError(t, err)
		r, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "desk", EventID: "tk-1", Type: "ticket.updated",
			OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Payload: json.RawMessage(`{"id":"T9","status":"open"}`)})
		require.NoError(t, err)
		require.Equal(t, opledger.EventConflict, r.Status)
		require.Contains(t, r.Reason, "operation desk:ticket:T9:sync is recorded with other content and no earlier event for ticket-updated:T9 is recorded")
		require.Empty(t, r.Event.OperationKeys)
		op, err := b.ledger.Get(b.ctx, "desk:ticket:T9:sync")
		require.NoError(t, err)
		require.Contains(t, string(op.Payload), "recorded by hand", "original kept")
	})

	// An event whose rule writes keys shaped like steps, of a stored
	// workflow without that step and of no stored workflow, beside an
	// operation recorded with the same content: the event checks
	// (WorkflowExists, OperationExists) what it found missing, records
	// both, and matches the operation. A later event whose rule writes
	// a step of the workflow is a conflict.
	t.Run("StepShapedKeysBesideWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "conf-ev-wf", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
		}})
		require.NoError(t, err)
		_, _, err = b.ledger.Record(b.ctx, opledger.Intent{Key: "conf-ev-kept", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
		require.NoError(t, err)
		rules, err := opledger.ParseRules([]byte(`
rules:
  - name: three
    source: shop
    type: three
    operations:
      - key: "conf-ev-wf/c"
        action: mail.send
        destination: mail
        payload: {x: 1}
      - key: "conf-ev-kept"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "conf-ev-nowf/x"
        action: mail.send
        destination: mail
        payload: {x: 1}
  - name: one
    source: shop
    type: one
    operations:
      - key: "conf-ev-nowf/y"
        action: mail.send
        destination: mail
        payload: {x: 1}
  - name: step
    source: shop
    type: step
    operations:
      - key: "conf-ev-nowf/z"
        action: mail.send
        destination: mail
        payload: {x: 1}
      - key: "conf-ev-wf/b"
        action: mail.send
        destination: mail
        payload: {x: 1}
`))
		require.NoError(t, err)
		receive := func(id, typ string) *opledger.EventResult {
			r, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "shop", EventID: id, Type: typ, Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			return r
		}
		r := receive("e-three", "three")
		require.Equal(t, opledger.EventApplied, r.Status, r.Reason)
		require.Equal(t, []string{"conf-ev-wf/c", "conf-ev-kept", "conf-ev-nowf/x"}, opKeys(r.Operations), "in the rule's order")
		r = receive("e-one", "one")
		require.Equal(t, opledger.EventApplied, r.Status, r.Reason)
		require.Equal(t, []string{"conf-ev-nowf/y"}, opKeys(r.Operations))
		r = receive("e-step", "step")
		require.Equal(t, opledger.EventConflict, r.Status)
		require.Contains(t, r.Reason, "operation conf-ev-wf/b is step b of workflow conf-ev-wf")
		_, err = b.ledger.Get(b.ctx, "conf-ev-nowf/z")
		require.ErrorIs(t, err, opledger.ErrNotFound, "a conflict applies nothing")
		again := receive("e-three", "three")
		require.True(t, again.Duplicate)
		require.Equal(t, []string{"conf-ev-wf/c", "conf-ev-kept", "conf-ev-nowf/x"}, opKeys(again.Operations), "a repeat answers in the rule's order")
	})

	t.Run("RefusedAndUnmapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		// A field the key needs is missing: refused, nothing recorded.
		_, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "forms", EventID: "evt-1", Type: "submission.accepted",
			Payload: json.RawMessage(`{"units":2,"applicant":{}}`)})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		var re *opledger.RuleError
		require.True(t, errors.As(err, &re))
		require.Equal(t, "intake-accepted", re.Rule)
		require.Contains(t, err.Error(), "data.submission_id is missing")
		// A produced key with personal data: refused, the value not echoed.
		_, err = b.ledger.ReceiveEvent(b.ctx, rules, submission("evt-2", "", "ana@example.com", 1))
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.Contains(t, err.Error(), `rule "intake-accepted": operations[0].key: the produced key is invalid`)
		require.NotContains(t, err.Error(), "ana@example.com")
		// Bad identifiers.
		for _, ev := range []opledger.Event{
			{Source: "forms", EventID: "", Type: "x"},
			{Source: "", EventID: "e", Type: "x"},
			{Source: "forms", EventID: "e", Type: ""},
			{Source: "forms", EventID: "a@b", Type: "x"},
			{Source: "forms", EventID: "e", Type: "x", Payload: json.RawMessage(`{`)},
		} {
			_, err := b.ledger.ReceiveEvent(b.ctx, rules, ev)
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
		}
		es, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Zero(t, es.Events)
		require.Zero(t, es.Deliveries, "a refused event records no delivery")

		// No rule for the type: recorded, nothing produced.
		r, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "forms", EventID: "evt-3", Type: "submission.withdrawn"})
		require.NoError(t, err)
		require.Equal(t, opledger.EventUnmapped, r.Status)
		require.Empty(t, r.Operations)
		r, err = b.ledger.ReceiveEvent(b.ctx, nil, opledger.Event{Source: "forms", EventID: "evt-4", Type: "submission.accepted"})
		require.NoError(t, err)
		require.Equal(t, opledger.EventUnmapped, r.Status, "no rules at all")
		_, err = b.ledger.GetEvent(b.ctx, "forms", "nope")
		require.ErrorIs(t, err, opledger.ErrNotFound)
	})

	t.Run("TenantsAndPaging", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		rules := mustRules(t)
		acme, err := b.ledger.WithTenant("acme")
		require.NoError(t, err)
		for i := range 5 {
			_, err := b.ledger.ReceiveEvent(b.ctx, rules, submission(fmt.Sprintf("evt-%d", i), "", fmt.Sprintf("S-%d", i), 1))
			require.NoError(t, err)
			b.clock.Advance(time.Millisecond)
		}
		r, err := acme.ReceiveEvent(b.ctx, rules, submission("evt-0", "", "S-0", 1))
		require.NoError(t, err)
		require.False(t, r.Duplicate, "the same event id in another tenant is another event")
		require.Equal(t, "acme", r.Operations[0].Tenant)

		var seen []string
		cursor := ""
		for {
			page, err := b.ledger.ListEvents(b.ctx, opledger.EventListOptions{Limit: 2, Cursor: cursor})
			require.NoError(t, err)
			for _, e := range page.Items {
				seen = append(seen, e.EventID)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		require.Equal(t, []string{"evt-4", "evt-3", "evt-2", "evt-1", "evt-0"}, seen, "newest first")
		all, err := b.ledger.EventStats(b.ctx, true)
		require.NoError(t, err)
		require.Equal(t, 6, all.Events)
		mine, err := acme.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 1, mine.Events)
		_, err = b.ledger.ListEvents(b.ctx, opledger.EventListOptions{Cursor: "garbage"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
	})
}
