// Package opledger is an operation ledger for automations: it lets a
// workflow retry an external side effect (create a CRM record, send an
// e-mail, charge a card) without doing it twice, and keeps every uncertain
// outcome visible until a lookup at the destination, a protection the
// destination documents, or a named person settles it.
//
// # Start here
//
// The core calls, in the order a program meets them:
//
//   - Open the ledger on a DSN (see Storage).
//   - Do an action under a key; a worker that cannot run inside Do uses
//     Record, Claim (or ClaimNext), Dispatch and Report instead.
//   - Maintain, in a goroutine of its own, settles the leases of workers
//     that died, moves workflows on and applies retention.
//   - Reconcile settles an uncertain operation from a lookup at the
//     destination (or its idempotency protection); Resolve records a
//     person's decision, with a reason, on one that is held, uncertain
//     or failed (a cancel also on one pending or awaiting approval).
//   - List and Get show the operations; Attempts and Timeline one
//     operation's history.
//   - Close the ledger when done; it waits for Maintain to stop.
//
// # Operations and attempts
//
// An operation is one intended business change under a stable key chosen
// by the caller ("intake:I17:create"), unique per tenant. Its content
// (action, destination, payload, version) has a fingerprint: the SHA-256 of
// its RFC 8785 canonical JSON. Recording the same key with the same
// fingerprint is a repeat and returns the stored operation; the same key
// with other content is refused with ErrFingerprintMismatch. Each try is an
// Attempt with its own ULID, never a new operation.
//
// # States
//
// An operation is awaiting_approval, pending, in_progress, uncertain, held,
// succeeded or failed; see State and docs/state_machine.md. Claim takes a
// pending operation atomically under a lease and a fencing token; Dispatch
// marks the moment the external call may start; ExtendLease lengthens the
// lease of a call that runs longer; Report records the outcome. A lease
// that expires before dispatch returns the operation to
// pending; after dispatch it makes the operation uncertain, never pending.
// Reconcile applies a lookup or the destination's idempotency protection to
// an uncertain operation (ClaimLookup first takes it for the lookup, so
// that processes sharing a store look it up one at a time); Resolve
// records an operator's decision, always with a reason.
//
// # Running an action
//
// Do wraps the whole protocol around a function:
//
//	op, err := ledger.Do(ctx, opledger.Intent{Key: "intake:I17:create", ...},
//		func(ctx context.Context, call opledger.Call) (opledger.Result, error) {
//			// call the destination, sending call.IdempotencyKey if it takes one
//		})
//
// Classify the function's errors with Rejected, Retryable and Uncertain.
//
// # Storage
//
// Open takes a DSN: "sqlite:PATH" for the embedded default (WAL,
// synchronous=FULL) or a "postgres://" URL for several processes and
// machines. Every time the ledger compares against comes from the store's
// clock.
//
// # Housekeeping
//
// ExpireLeases settles lapsed claims; AdvanceWorkflows moves on workflows
// whose current step succeeded; Compact reduces old final operations to
// tombstones that still recognise a very late repeat; Announce records
// the process, with digests of its settings, so that processes sharing a
// store see one that runs with other settings (Processes). Maintain runs
// all four at their intervals (MaintainOptions): opledger serve and
// opledger proxy run it, and a program that embeds the library starts it
// itself:
//
//	go ledger.Maintain(ctx, opledger.MaintainOptions{})
//
// A program that derives its keys from settings (the proxy derives them
// from its tenant and a credential header) records those settings with
// PinKeyScope, which refuses others later: under them every earlier key
// would be another, and each repeat taken as new.
package opledger
