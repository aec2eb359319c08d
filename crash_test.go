package opledger_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestCrashedWorker kills (SIGKILL) a real child process that holds a claim
// and checks what lease expiry makes of it: after dispatch the operation
// becomes uncertain, never pending; before dispatch it returns to pending.
func TestCrashedWorker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		step      string
		want      opledger.State
		attemptIs string
	}{
		{"after_dispatch", opledger.StateUncertain, opledger.AttemptLeaseExpired},
		{"after_claim", opledger.StatePending, opledger.AttemptAbandoned},
	}
	for _, tc := range cases {
		t.Run(tc.step, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")

			child := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			child.Env = append(os.Environ(), "OPLEDGER_CRASH_CHILD=1", "OPLEDGER_CRASH_DSN="+dsn, "OPLEDGER_CRASH_STEP="+tc.step)
			stdin, err := child.StdinPipe() // the child blocks reading it until killed
			require.NoError(t, err)
			defer stdin.Close()
			stdout, err := child.StdoutPipe()
			require.NoError(t, err)
			child.Stderr = os.Stderr
			require.NoError(t, child.Start())

			var attemptID string
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "HOLDING "); ok {
					attemptID = id
					break
				}
			}
			require.NotEmpty(t, attemptID, "child never reported its claim")

			require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			err = child.Wait()
			require.Error(t, err)
			ws := child.ProcessState.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child died of SIGKILL: %v", err)

			var offset time.Duration
			l, err := opledger.Open(ctx, dsn, opledger.Options{Clock: func(now time.Time) time.Time { return now.Add(offset) }})
			require.NoError(t, err)
			defer l.Close()

			// While the dead worker's lease runs, nothing moves.
			n, err := l.ExpireLeases(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
			op, err := l.Get(ctx, "crash:op")
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, op.State)
			require.Equal(t, attemptID, op.CurrentAttemptID)

			offset = time.Minute // past the child's 20 s lease
			n, err = l.ExpireLeases(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			op, err = l.Get(ctx, "crash:op")
			require.NoError(t, err)
			require.Equal(t, tc.want, op.State)
			attempts, err := l.Attempts(ctx, "crash:op")
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.Equal(t, tc.attemptIs, attempts[0].Outcome)
			if tc.want == opledger.StateUncertain {
				_, err = l.Claim(ctx, "crash:op", opledger.ClaimOptions{})
				require.ErrorIs(t, err, opledger.ErrInvalidState, "an uncertain operation is not claimable")
			}
		})
	}
}

// TestCrashChild is the worker TestCrashedWorker kills. It does nothing
// unless started by that test.
func TestCrashChild(t *testing.T) {
	if os.Getenv("OPLEDGER_CRASH_CHILD") != "1" {
		t.Skip("run only as the child of TestCrashedWorker")
	}
	ctx := context.Background()
	l, err := opledger.Open(ctx, os.Getenv("OPLEDGER_CRASH_DSN"), opledger.Options{Worker: "doomed-worker", Lease: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Claim(ctx, "crash:op", opledger.ClaimOptions{Intent: &opledger.Intent{
		Key: "crash:op", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("OPLEDGER_CRASH_STEP") == "after_dispatch" {
		if _, err := l.Dispatch(ctx, "crash:op", c.AttemptID, c.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("HOLDING " + c.AttemptID)
	// Hold the claim until killed.
	_, _ = os.Stdin.Read(make([]byte, 1))
	t.Fatal("child was not killed")
}
