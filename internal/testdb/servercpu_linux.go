package testdb

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// clockTicksPerSecond is the unit of the CPU times in /proc/PID/stat
// (USER_HZ, 100 on every Linux architecture Go supports).
const clockTicksPerSecond = 100

// PostgresServerCPU returns the CPU time (user and system, in
// microseconds) of the PostgreSQL server's processes on this machine,
// with what the postmaster's exited children used, and true; false when
// no PostgreSQL process can be read (the server runs elsewhere, or as a
// user whose /proc entries are hidden). The resolution is a clock tick
// (10 ms) per process: take the difference over thousands of operations.
func PostgresServerCPU() (int64, bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	found := false
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the process has exited
		}
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open || string(b[open+1:end]) != "postgres" {
			continue
		}
		// After "pid (comm) ": state, ppid, …; utime, stime, cutime and
		// cstime are fields 14 to 17 of the line, 11 to 14 from state.
		f := bytes.Fields(b[end+1:])
		if len(f) < 15 {
			continue
		}
		for _, v := range f[11:15] {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, false
			}
			ticks += n
		}
		found = true
	}
	return ticks * (1_000_000 / clockTicksPerSecond), found
}
