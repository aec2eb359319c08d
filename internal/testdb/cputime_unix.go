//go:build unix

package testdb

import "syscall"

// ProcessCPU returns the CPU time (user and system) the process has used,
// in microseconds, and true; false where it cannot be read. Benchmarks
// report it per operation: less sensitive than ns/op to other work on a
// shared machine, though not immune.
func ProcessCPU() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano()/1000 + ru.Stime.Nano()/1000, true
}
