// Package lab holds the laboratory of DESIGN.md section 7: simulated
// destinations with fault knobs, a webhook source that repeats and reorders
// deliveries, and worker crash points. The interactive scenarios, the CSV
// cases run by "opledger lab run" and the deterministic simulation (package
// lab/sim) are built on it.
//
// # Destinations
//
// Three destinations model the three kinds of guarantee a real one can
// declare (package destination):
//
//   - CRM: a unique external reference and an authoritative lookup by it,
//     with a visibility delay; a duplicate create is refused with 409.
//   - Email: nothing. Every accepted call is an effect; an uncertain send
//     can only be decided by a person.
//   - Payment: an idempotency key kept for a retention window; the same key
//     with the same parameters replays the original answer, with other
//     parameters it is refused (422); after the window the key is
//     forgotten and a resend is a second charge.
//
// Each one is a single model reached two ways, which behave alike: in
// process (Call and Lookup, implementing destination.Destination and
// destination.Lookuper), and over HTTP (Handler, for destination.HTTP or
// the proxy). An in-process answer is classified by the same
// destination.ClassifyStatus that classifies the HTTP answer, and a lost
// answer is the same *destination.SendError marked uncertain.
//
// # Faults
//
// Inject queues faults for the next calls, one per call (see Fault), and
// a lookup fault (FaultLookupError) for the CRM's next lookups, one per
// lookup; the email and the payment, which look nothing up, refuse a
// lookup fault with an error and queue nothing. Each destination counts the attempts it received, the effects
// it made and the lookups it received (Counters), and the effects made per operation key
// (EffectsFor), so that tests and the simulation can check invariants
// against what really happened at the destination.
//
// # Wire format
//
// Over HTTP every destination takes
//
//	POST /records  {"key": "<operation key>", "external_ref": "<optional>", "payload": <any JSON>}
//
// and answers 201 {"id": "<ref>", ...} with the record. The payment reads
// the Idempotency-Key header. The CRM also serves
//
//	GET /records?external_ref=X   {"items": [<records visible now>]}
//
// Every time is read from the destination's Now, so a simulated clock
// drives visibility and retention.
//
// Allowed imports: opledger, opledger/destination, opledger/reconciler
// (the verify step), pgx (a fresh schema per case on PostgreSQL),
// internal/store/pgstore (to tell a PostgreSQL DSN), the standard
// library.
package lab
