// Package chaostest holds the multi-process crash test of opledger (issue 3,
// "Prove it"): several OS processes, each running several workers, race over
// the same 10,000 operations in one database while the test kills some of
// them with SIGKILL and restarts them, and a real HTTP destination counts
// the effects per key. It runs against PostgreSQL and against one SQLite
// file shared by all processes.
//
// The package has no API. The worker program is in chaosworker; the test
// builds it and starts it as child processes.
//
//	go test -race -count=1 -v ./internal/chaostest/
//
// # What it checks
//
// Once every operation has settled: every recorded operation is there with
// its content; no key has two effects at either destination; an operation
// succeeded only with a reference the destination made; every operation
// at the protected destination (which deduplicates by idempotency key for
// 24 h) succeeded, and if an answer there was lost or its sender killed,
// protected retries were sent and answered as replays; at the unprotected
// destination an operation may also end held or uncertain, with evidence;
// every scheduled kill was carried out, and no worker died unasked or
// logged an error.
//
// # Environment
//
// OPLEDGER_CHAOS_SEED replays a run's kill schedule and fault choices (the
// seed is logged); the interleaving of the processes is up to the machine.
//
// OPLEDGER_CHAOS_RACE=1 builds the worker with -race too. By default it is
// built without, so that under go test -race the test process (destination,
// supervisor, checks) is instrumented and the workers run at full speed.
// With it, a race report in a worker's standard error counts as a worker
// error and fails the run.
package chaostest
