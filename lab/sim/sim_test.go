package sim_test

import (
	"context"
	"flag"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/lab"
	"github.com/opledger/opledger/lab/sim"
)

var (
	seedFlag    = flag.Int64("seed", -1, "run only this seed (replay)")
	seedsFlag   = flag.Int("seeds", 200, "number of seeds TestSim runs, from 1")
	workersFlag = flag.Int("workers", 3, "simulated workers per run")
	opsFlag     = flag.Int("ops", 10, "operations per run")
	traceFlag   = flag.Bool("simtrace", false, "log the trace of each run")
	strictFlag  = flag.Bool("strict", false, "fail on violations of known bugs too (sim.KnownBugs)")
)

// minCoverageSeeds is the smallest sweep that TestSim requires to have
// injected every fault (a failing lookup at the CRM too) and crashed a worker at every crash point (as the
// -short sweep of 50 seeds and the full one of 200 must); a replay of one
// seed, or a sweep narrowed with -seeds, is not held to it.
const minCoverageSeeds = 50

// TestSim runs the simulation for many seeds (200, 50 with -short; or one,
// with -seed) and
// fails on any violation that is not a known bug, printing how to replay
// the seed. Known bugs are counted and logged. A sweep of at least
// minCoverageSeeds must have injected every lab.Fault, crashed a worker at
// every lab.CrashPoint and made a call after its lease.
func TestSim(t *testing.T) {
	n := *seedsFlag
	if testing.Short() && n > 50 {
		n = 50
	}
	seeds := make([]int64, 0, n)
	if *seedFlag >= 0 {
		seeds = append(seeds, *seedFlag)
	} else {
		for s := 1; s <= n; s++ {
			seeds = append(seeds, int64(s))
		}
	}
	dir := t.TempDir()
	start := time.Now()
	// Seeds are independent: run as many at once as there are CPUs, and
	// judge them in seed order.
	reports := make([]*sim.Report, len(seeds))
	errs := make([]error, len(seeds))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				reports[i], errs[i] = sim.Run(context.Background(), sim.Config{Seed: seeds[i], Workers: *workersFlag,
					Operations: *opsFlag, Dir: dir, KeepTrace: *traceFlag})
			}
		}()
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	failed := 0
	known := map[sim.Invariant]int{}
	knownSeeds := 0
	// What the seeds injected, summed: a sweep that injects nothing proves
	// nothing.
	faults, crashes, lateCalls, failedLookups := map[string]int{}, map[string]int{}, 0, 0
	for i, rep := range reports {
		require.NoError(t, errs[i], "seed %d", seeds[i])
		for k, n := range rep.Faults {
			faults[k] += n
		}
		for k, n := range rep.Crashes {
			crashes[k] += n
		}
		lateCalls += rep.LateCalls
		failedLookups += rep.FailedLookups
		if *traceFlag {
			t.Log("\n" + strings.Join(rep.Trace, "\n"))
		}
		for _, v := range rep.Violations {
			if v.Known() {
				known[v.Invariant]++
			}
		}
		if len(rep.Violations) > len(rep.Unknown()) {
			knownSeeds++
		}
		switch {
		case len(rep.Unknown()) > 0 || (*strictFlag && !rep.OK()):
			failed++
			t.Errorf("%s", rep)
		case !rep.OK() && len(seeds) == 1:
			t.Logf("%s", rep)
		}
	}
	t.Logf("%d seeds, %d failed, in %s", len(seeds), failed, time.Since(start).Round(time.Millisecond))
	t.Logf("injected: faults %v; crashes %v; %d calls after their lease; %d failed lookups", faults, crashes, lateCalls, failedLookups)
	if len(seeds) < minCoverageSeeds {
		t.Logf("%d seeds: fewer than %d, so not checked for every fault and crash point", len(seeds), minCoverageSeeds)
	} else {
		for _, f := range lab.Faults {
			require.Positive(t, faults[f.String()], "no seed injected fault %s", f)
		}
		for _, c := range lab.CrashPoints {
			require.Positive(t, crashes[c.String()], "no seed crashed a worker %s", c)
		}
		require.Positive(t, lateCalls, "no seed made a call after its lease had expired")
		// A lookup_error injected is one taken: it is injected just
		// before the lookup that takes it.
		require.Equal(t, faults[lab.FaultLookupError.String()], failedLookups, "lookup faults injected and lookups failed")
	}
	if knownSeeds > 0 {
		var names []string
		for inv, n := range known {
			names = append(names, string(inv)+"="+strconv.Itoa(n))
		}
		sort.Strings(names)
		t.Logf("KNOWN BUGS hit in %d of %d seeds (%s): %s; run with -strict to fail on them",
			knownSeeds, len(seeds), strings.Join(names, " "), sim.KnownBugs[sim.ProtectionExpired])
	}
}

// One seed replays exactly: the same trace digest, the same figures.
func TestSimIsDeterministic(t *testing.T) {
	t.Parallel()
	run := func(seed int64) *sim.Report {
		rep, err := sim.Run(context.Background(), sim.Config{Seed: seed, Dir: t.TempDir(), KeepTrace: true})
		require.NoError(t, err)
		return rep
	}
	a, b := run(7), run(7)
	require.Equal(t, a.Trace, b.Trace)
	require.Equal(t, a.Digest, b.Digest)
	require.Len(t, a.Digest, 64)
	a.Trace, b.Trace = nil, nil
	require.Equal(t, a, b)
	c := run(8)
	require.NotEqual(t, a.Digest, c.Digest, "another seed, another schedule")
}

// The simulation runs on PostgreSQL too (skipped without a server).
func TestSimPostgres(t *testing.T) {
	t.Parallel()
	for seed := int64(1); seed <= 3; seed++ {
		rep, err := sim.Run(context.Background(), sim.Config{Seed: seed, Operations: 10, DSN: testdb.PostgresDSN(t)})
		require.NoError(t, err)
		require.Equal(t, "postgres", rep.Store)
		require.Empty(t, rep.Unknown(), "%s", rep)
	}
}
