package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// claimedAtStart is what a process logs once, after its first lease
// sweep, about the claims of leases not yet ended (operations.md,
// "Crashed workers and leases").
const claimedAtStart = "operations claimed by leases not yet ended"

// sigkill kills cmd with SIGKILL and checks that it died of it.
func sigkill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err := cmd.Wait()
	require.Error(t, err)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%s died of SIGKILL: %v", cmd.Args[1], err)
}

// waitLog waits, at most a minute (a guard, not a wait), until logs holds
// want.
func waitLog(t *testing.T, logs *testrig.LogBuffer, want string) {
	t.Helper()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(logs.String(), want); <-poll.C {
		require.False(t, time.Now().After(deadline), "never logged %q:\n%s", want, logs)
	}
}

// onlyOperation returns the one operation of l's tenant.
func onlyOperation(t *testing.T, l *opledger.Ledger) *opledger.Operation {
	t.Helper()
	page, err := l.List(context.Background(), opledger.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	return page.Items[0]
}

// TestProxyKilledMidForward kills (SIGKILL) an 'opledger proxy' process
// while the upstream, having acted, has not answered, and starts another
// on the same ledger (docs/proxy.md: "A proxy that dies mid-forward leaves
// the operation in_progress until its lease ends (the upstream timeout
// plus one minute); it then becomes uncertain, never pending. Repeats
// meanwhile get 409 in_progress"). The new proxy's lease sweep does not
// take the dead one's claim back early, a repeat is never forwarded
// again, and the lease's end makes the operation uncertain.
func TestProxyKilledMidForward(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			up := fakedest.New(t, fakedest.Options{})
			dsn := st.NewDSN(t)
			start := func() (*exec.Cmd, *testrig.LogBuffer, string) {
				logs := &testrig.LogBuffer{}
				cmd := exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.URL(), "--db", dsn,
					"--timeout", "1s", "--reconcile-interval", "100ms")
				return cmd, logs, startedURL(t, cmd, logs)
			}
			const body = `{"external_ref":"o1","amount":1}`

			first, _, firstBase := start()
			arrived := up.Arrivals()
			up.Fail(fakedest.Hang) // the record is made, the answer never comes
			go func() {
				// Cut off by the kill: no answer to check.
				req, _ := http.NewRequest(http.MethodPost, firstBase+"/records", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", "order-1")
				req.Header.Set("Authorization", "Bearer cli_SECRET_token")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			<-arrived
			sigkill(t, first)
			require.Equal(t, 1, up.Effects(), "the upstream acted")

			l, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			defer l.Close()
			killed := onlyOperation(t, l)
			require.Equal(t, opledger.StateInProgress, killed.State)
			require.True(t, killed.Dispatched)
			require.NotNil(t, killed.LeaseExpiresAt)
			attempts, err := l.Attempts(ctx, killed.Key)
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.Equal(t, time.Second+time.Minute, attempts[0].LeaseExpiresAt.Sub(attempts[0].ClaimedAt).Round(time.Second),
				"the lease is the upstream timeout plus one minute")

			// Another proxy on the same ledger: its first lease sweep
			// leaves the dead one's claim as it is.
			cmd, logs, base := start()
			waitLog(t, logs, claimedAtStart)
			require.Regexp(t, claimedAtStart+`[^\n]* count=1\n`, logs.String())
			op, err := l.Get(ctx, killed.Key)
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, op.State, "the restart does not take the claim back")
			require.Equal(t, killed.CurrentAttemptID, op.CurrentAttemptID)

			repeat := postThrough(t, base+"/records", "order-1", body)
			require.Equal(t, http.StatusConflict, repeat.status, repeat.body)
			require.Contains(t, repeat.body, "in_progress")
			after, err := strconv.Atoi(repeat.header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", repeat.header.Get("Retry-After"))
			require.True(t, after >= 1 && after <= 61, "Retry-After %d: at most the lease left", after)
			require.Equal(t, 1, up.Creates(), "the repeat was not forwarded")

			// The lease ends: uncertain (then held by the reconciler, as
			// this upstream declares no lookup), never pending.
			var offset time.Duration
			later, err := opledger.Open(ctx, dsn, opledger.Options{Clock: func(now time.Time) time.Time { return now.Add(offset) }})
			require.NoError(t, err)
			defer later.Close()
			offset = 2 * time.Minute
			n, err := later.ExpireLeases(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			op, err = l.Get(ctx, killed.Key)
			require.NoError(t, err)
			require.Contains(t, []opledger.State{opledger.StateUncertain, opledger.StateHeld}, op.State, "never pending")
			attempts, err = l.Attempts(ctx, killed.Key)
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.Equal(t, opledger.AttemptLeaseExpired, attempts[0].Outcome)
			again := postThrough(t, base+"/records", "order-1", body)
			require.Equal(t, http.StatusConflict, again.status, again.body)
			require.Equal(t, 1, up.Creates(), "nothing is forwarded again")
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, cmd.Wait())
		})
	}
}

// TestServeKilledMidCall kills (SIGKILL) an 'opledger serve' whose executor
// is in the middle of a call that took effect, and starts another on the
// same ledger (operations.md, "Crashed workers and leases": the new server
// does not take back its predecessor's claims, which belong to the dead
// process's workers, says how many there are once after its first lease
// sweep, and when the lease ends the sweep makes the operation uncertain
// and the reconciler takes it at once). The lookup finds the effect: one
// record at the destination, never a second call.
func TestServeKilledMidCall(t *testing.T) {
	t.Parallel()
	crm := fakedest.New(t, fakedest.Options{Unique: true})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "destinations.yaml"), []byte(strings.ReplaceAll(`
destinations:
  - name: crm
    url: @CRM@/records
    body: '{"external_ref": {{json .Key}}}'
    ref: /id
    timeout: 1s
    lookup:
      url: @CRM@/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 1ms
      match:
        - record: /external_ref
          value: "{{.Key}}"
`, "@CRM@", crm.URL())), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "opledger.yaml"), []byte("destinations: destinations.yaml\n"), 0o644))
	dsn := "sqlite:" + filepath.Join(dir, "l.db")
	// Long enough for the restart, and its first sweep, to come before
	// its end on a machine loaded by the whole test suite (10 s left
	// little margin); the test waits for it to end.
	const lease = 30 * time.Second
	serve := func() (*exec.Cmd, *testrig.LogBuffer) {
		logs := &testrig.LogBuffer{}
		cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", filepath.Join(dir, "opledger.yaml"),
			"--lease", lease.String(), "--sweep-interval", "100ms")
		startedURL(t, cmd, logs)
		return cmd, logs
	}
	ctx := context.Background()
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	defer l.Close()

	arrived := crm.Arrivals()
	crm.Fail(fakedest.Hang) // the record is made, the answer never comes
	cmd, _ := serve()
	_, _, err = l.Record(ctx, opledger.Intent{Key: "crm:1:create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	<-arrived
	deadPID := cmd.Process.Pid
	sigkill(t, cmd)
	require.Equal(t, 1, crm.Effects(), "the destination acted")

	cmd, logs := serve()
	waitLog(t, logs, claimedAtStart)
	require.Regexp(t, claimedAtStart+`[^\n]* count=1\n`, logs.String(), "said before the lease of %s ended", lease)
	op, err := l.Get(ctx, "crm:1:create")
	require.NoError(t, err)
	require.Equal(t, opledger.StateInProgress, op.State, "the restart does not take the claim back")
	require.True(t, op.Dispatched)
	attempts, err := l.Attempts(ctx, "crm:1:create")
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, op.CurrentAttemptID, attempts[0].ID)
	require.Contains(t, attempts[0].Worker, fmt.Sprintf(":%d/", deadPID), "the dead process's worker holds it")

	// The lease ends: the restarted server's sweep makes the operation
	// uncertain, not sooner, and its reconciler looks it up and finds
	// the record.
	deadline := time.Now().Add(time.Minute)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for ; ; <-poll.C {
		op, err = l.Get(ctx, "crm:1:create")
		require.NoError(t, err)
		require.NotEqual(t, opledger.StatePending, op.State, "a dispatched claim never goes back to pending")
		if op.State == opledger.StateSucceeded {
			break
		}
		require.True(t, time.Now().Before(deadline), "still %s", op.State)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	require.Equal(t, 1, crm.Creates(), "no second call: the lookup found the first record")
	attempts, err = l.Attempts(ctx, "crm:1:create")
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, opledger.AttemptLeaseExpired, attempts[0].Outcome)
	tl, err := l.Timeline(ctx, "crm:1:create")
	require.NoError(t, err)
	var events []string
	for _, e := range tl {
		events = append(events, e.Event)
	}
	require.Contains(t, events, "lookup found the effect")
	i := slices.Index(events, "lease expired after dispatch")
	require.GreaterOrEqual(t, i, 0, "%v", events)
	require.False(t, tl[i].At.Before(attempts[0].LeaseExpiresAt), "settled at %s, before the lease ended at %s", tl[i].At, attempts[0].LeaseExpiresAt)
}
