package testdb

import (
	"runtime"
	"testing"
)

// RunCallers runs op b.N times, with the timer running only around the
// calls, and reports cpu-µs/op: the CPU time (user and system) the process
// spent per call, where ProcessCPU can read it. With callers 1 the calls
// run one after the other in the benchmark's goroutine; otherwise from
// about callers goroutines at once (b.RunParallel, callers ÷ GOMAXPROCS
// per CPU, rounded up). The first error stops the benchmark.
func RunCallers(b *testing.B, callers int, op func() error) {
	b.Helper()
	cpuBefore, cpuOK := ProcessCPU()
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		for range b.N {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	if cpuAfter, ok := ProcessCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpuAfter-cpuBefore)/float64(b.N), "cpu-µs/op")
	}
}
