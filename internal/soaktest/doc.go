// Package soaktest holds the soak test of opledger: every kind of ledger
// write at once, on a small set of overlapping keys, from two Ledger
// values sharing one store (as two processes would), for a fixed time,
// on SQLite and on PostgreSQL. On PostgreSQL it runs in a database of its
// own and asserts that the server detected no deadlock in it; on both
// stores it then checks the ledger's invariants across the whole ledger.
//
// The package has no API.
//
//	go test -race -count=1 -v ./internal/soaktest/
//	OPLEDGER_SOAK_DURATION=3m go test -run TestSoak ./internal/soaktest/
//
// OPLEDGER_SOAK_DURATION (a Go duration) sets how long the workload runs on
// each store; the default is 15 s. docs/development.md ("The soak") says
// what runs and what is checked.
package soaktest
