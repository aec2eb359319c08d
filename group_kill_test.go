package opledger_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// Each child finishes groupKillAcks operations, enough for many shared
// transactions of its 32 callers, before it is killed.
const (
	groupKillAcks   = 100
	groupKillRounds = 10
	// groupKillDeadline bounds one child's run: a failure bound for a
	// child that hangs, not a measurement.
	groupKillDeadline = 2 * time.Minute
)

// TestGroupCommitSurvivesKill kills (SIGKILL) a real child process while
// 32 of its goroutines run protected operations (a claim with its intent
// inline, then a success report), the load under which both stores write
// many callers in one shared transaction (the stores' own tests count the
// sharing: TestGroupCommitIsolatesCallers, TestGroupIsolatesCallers).
// Each goroutine prints a line after a call has returned, so every line the
// parent reads names a write that the child was told is committed. Any one
// kill may fall between two commits, so the test kills groupKillRounds
// children, one after the other, on the same ledger. After the kills:
//
//   - every reported success is in the ledger, with its attempt and its
//     timeline: a caller is released only after the commit covering its
//     write, never from a queue that dies with the process;
//   - every reported claim is there, still in progress under its attempt or
//     succeeded (the report committed, its line was not printed);
//   - no operation is half written: each has exactly one attempt, and the
//     attempts' outcomes match the states;
//   - the dead worker's open claims return to pending once their lease has
//     run out, and the ledger takes new claims.
//
// A killed process leaves the operating system's cache behind, so this
// checks the order of release and commit, not the fsync itself (the stores
// keep synchronous=FULL and synchronous_commit on for that).
func TestGroupCommitSurvivesKill(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)

			claimed := map[string]string{} // key → attempt id
			done := map[string]bool{}
			for round := range groupKillRounds {
				killGroupChild(t, dsn, round, claimed, done)
			}

			var offset time.Duration
			l, err := opledger.Open(ctx, dsn, opledger.Options{Clock: func(now time.Time) time.Time { return now.Add(offset) }})
			require.NoError(t, err)
			defer l.Close()

			inProgress := 0
			for key, attemptID := range claimed {
				op, err := l.Get(ctx, key)
				require.NoError(t, err, "claimed operation %s is missing", key)
				attempts, err := l.Attempts(ctx, key)
				require.NoError(t, err)
				require.Len(t, attempts, 1, key)
				require.Equal(t, attemptID, attempts[0].ID, key)
				if done[key] {
					require.Equal(t, opledger.StateSucceeded, op.State, "acknowledged report of %s is missing", key)
				}
				switch op.State {
				case opledger.StateSucceeded:
					require.Equal(t, string(opledger.OutcomeSucceeded), attempts[0].Outcome, key)
					timeline, err := l.Timeline(ctx, key)
					require.NoError(t, err)
					require.NotEmpty(t, timeline, key)
					require.Equal(t, opledger.StateSucceeded, timeline[len(timeline)-1].To, key)
				case opledger.StateInProgress:
					inProgress++
					require.Equal(t, attemptID, op.CurrentAttemptID, key)
					require.Empty(t, attempts[0].Outcome, key)
				default:
					t.Fatalf("%s is %s after the kill", key, op.State)
				}
			}
			for key := range done {
				require.Contains(t, claimed, key, "a report was printed before its claim")
			}

			// No operation of the ledger, printed or not, is half written.
			stats, err := l.Stats(ctx, false)
			require.NoError(t, err)
			total := 0
			for _, n := range stats.OperationsByState {
				total += n
			}
			require.GreaterOrEqual(t, total, len(claimed))
			require.Equal(t, total, stats.AttemptsTotal, "each operation has exactly one attempt")
			require.Equal(t, total, stats.OperationsByState[opledger.StateSucceeded]+stats.OperationsByState[opledger.StateInProgress], "%v", stats.OperationsByState)
			outcomes := map[string]int{}
			for _, a := range stats.Attempts {
				outcomes[a.Outcome] += a.Count
			}
			require.Equal(t, stats.OperationsByState[opledger.StateSucceeded], outcomes[string(opledger.OutcomeSucceeded)])
			require.Equal(t, stats.OperationsByState[opledger.StateInProgress], outcomes["open"])
			require.GreaterOrEqual(t, stats.OperationsByState[opledger.StateInProgress], inProgress)

			// The dead worker's claims come back once their lease is over.
			offset = 2 * time.Hour // past the child's lease
			n, err := l.ExpireLeases(ctx)
			require.NoError(t, err)
			require.Equal(t, stats.OperationsByState[opledger.StateInProgress], n)
			for key := range claimed {
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Contains(t, []opledger.State{opledger.StateSucceeded, opledger.StatePending}, op.State, key)
			}
			_, err = l.Claim(ctx, "group:after", opledger.ClaimOptions{Intent: &opledger.Intent{
				Key: "group:after", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":0}`)}})
			require.NoError(t, err)
			t.Logf("%d claims and %d reports acknowledged before %d kills; %d operations in the ledger, %d left in progress",
				len(claimed), len(done), groupKillRounds, total, stats.OperationsByState[opledger.StateInProgress])
		})
	}
}

// killGroupChild starts the child of round on dsn, reads what it reports
// until it has finished groupKillAcks operations, kills it with SIGKILL and
// reads the lines it wrote before it died, into claimed and done.
func killGroupChild(t *testing.T, dsn string, round int, claimed map[string]string, done map[string]bool) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^TestGroupCommitKillChild$", "-test.count=1")
	child.Env = append(os.Environ(), "OPLEDGER_GROUP_KILL_CHILD=1", "OPLEDGER_GROUP_KILL_DSN="+dsn,
		"OPLEDGER_GROUP_KILL_ROUND="+strconv.Itoa(round))
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	watchdog := time.AfterFunc(groupKillDeadline, func() { _ = child.Process.Kill() })
	defer watchdog.Stop()

	finished := 0
	var childErrors []string
	sc := bufio.NewScanner(stdout)
	read := func(line string) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "CLAIMED":
			claimed[f[1]] = f[2]
		case len(f) == 2 && f[0] == "DONE":
			done[f[1]] = true
			finished++
		case len(f) > 0 && f[0] == "ERROR":
			childErrors = append(childErrors, line)
		}
	}
	for finished < groupKillAcks && sc.Scan() {
		read(sc.Text())
	}
	require.Empty(t, childErrors, "the child of round %d failed", round)
	require.Equal(t, groupKillAcks, finished, "the child of round %d stopped, or did not finish %d operations within %s", round, groupKillAcks, groupKillDeadline)
	watchdog.Stop()
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	killed = true
	// Lines written before the kill are still in the pipe.
	for sc.Scan() {
		read(sc.Text())
	}
	require.Empty(t, childErrors, "the child of round %d failed", round)
	err = child.Wait()
	require.Error(t, err)
	ws := child.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child died of SIGKILL: %v", err)
}

// TestGroupCommitKillChild is the process TestGroupCommitSurvivesKill
// kills. It does nothing unless started by that test.
func TestGroupCommitKillChild(t *testing.T) {
	if os.Getenv("OPLEDGER_GROUP_KILL_CHILD") != "1" {
		t.Skip("run only as the child of TestGroupCommitSurvivesKill")
	}
	ctx := context.Background()
	l, err := opledger.Open(ctx, os.Getenv("OPLEDGER_GROUP_KILL_DSN"), opledger.Options{Worker: "doomed-group", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	round := os.Getenv("OPLEDGER_GROUP_KILL_ROUND")
	var out sync.Mutex // one write per line, so that lines never interleave
	say := func(format string, a ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", a...)
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for n := 0; ; n++ {
				key := "group:" + round + ":" + strconv.Itoa(g) + ":" + strconv.Itoa(n)
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{
					Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}})
				if err != nil {
					say("ERROR %v", err)
					return
				}
				say("CLAIMED %s %s", key, c.AttemptID)
				if _, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ref-" + key}); err != nil {
					say("ERROR %v", err)
					return
				}
				say("DONE %s", key)
			}
		})
	}
	wg.Wait()
	t.Fatal("the child's callers stopped before it was killed")
}
