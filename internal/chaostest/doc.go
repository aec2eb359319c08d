// Package chaostest holds the multi-process crash test of opledger (issue 3,
// "Prove it"): several OS processes, each running several workers, race over
// the same 10,000 operations in one database while the test kills some of
// them with SIGKILL and restarts them, and a real HTTP destination counts
// the effects per key. It runs against PostgreSQL and against one SQLite
// file shared by all processes.
//
// The package has no API. The worker program is in chaosworker; the test
// builds it (without the race detector, so that the workers run at full
// speed under go test -race; set OPLEDGER_CHAOS_RACE=1 to build it with
// -race) and starts it as child processes.
//
//	go test -race -count=1 -v ./internal/chaostest/
//
// OPLEDGER_CHAOS_SEED replays a run's kill schedule and fault choices (the
// seed is logged); the interleaving of the processes is up to the machine.
package chaostest
