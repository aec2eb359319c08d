//go:build !linux

package testdb

// PostgresServerCPU cannot read the server's CPU time here.
func PostgresServerCPU() (int64, bool) { return 0, false }
