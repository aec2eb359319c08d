//go:build !unix

package testdb

// ProcessCPU cannot read the process's CPU time here.
func ProcessCPU() (int64, bool) { return 0, false }
