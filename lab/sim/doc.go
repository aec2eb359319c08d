// Package sim is opledger's deterministic simulation: simulated workers,
// the real reconciler and the lab's simulated destinations (CRM, email,
// payment) run against the real ledger and a real store, on a simulated
// clock, while faults are injected at random: every lab.Fault at the
// destinations (lab.FaultLookupError at the CRM's lookups, the others at
// calls), every lab.CrashPoint in the workers, duplicate and
// reordered webhook deliveries, and jumps of the clock past leases,
// visibility delays and the payment's key retention.
//
// # Determinism
//
// Nothing runs concurrently. One loop, driven by a math/rand/v2 PCG
// generator seeded with Config.Seed, chooses every step: which worker
// moves one step of its attempt (claim, dispatch, call, report), when the
// reconciler or the lease sweep passes, when a webhook delivery arrives,
// which fault the next call or CRM lookup gets, and how far the clock jumps. The ledger
// reads that clock through opledger.Options.Clock and the destinations
// through their Now. So a seed replays exactly: Report.Digest is the
// SHA-256 of the event trace, and two runs of a seed give the same digest.
//
// The retry policy has no jitter (InitialDelay 0; backoff is the
// destination's Retry-After), because the ledger draws its jitter from the
// global random source.
//
// # Phases
//
// The fault phase runs Config.Steps random steps. The drain phase then
// injects nothing: the workers finish what they hold, the clock moves on a
// minute at a time, and the reconciler, the lease sweep and the workers
// run until nothing is due. Then the invariants are checked (see
// Invariant), each violation a named error in the Report.
//
// Allowed imports: opledger, opledger/destination, opledger/reconciler,
// opledger/lab, the standard library.
package sim
