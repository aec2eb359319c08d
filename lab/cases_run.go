package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/pgstore"
)

// RunOptions configure RunCases.
type RunOptions struct {
	// DSN, when set, is a PostgreSQL URL: each case runs in a schema of its
	// own, dropped afterwards. Empty: each case gets a fresh SQLite file in
	// a temporary directory.
	DSN string
	// Progress, if set, is called after each case with how many are done.
	Progress func(done, total int)
	// WorkerCommand, if set, runs every crash step in a worker process:
	// the command (e.g. {os.Executable(), "lab", "worker"}) plus RunWorker's
	// flags, killed with SIGKILL at its crash point. Empty: a crash is the
	// same steps in process, abandoned at the crash point.
	WorkerCommand []string
}

// CaseResult is the outcome of one case.
type CaseResult struct {
	Case Case `json:"case"`
	// Got is what was observed.
	Got Expectation `json:"got"`
	// Pass: every counter and the state are as expected.
	Pass bool `json:"pass"`
	// Differences name the columns that differ, "attempts: want 2, got 3".
	Differences []string `json:"differences,omitempty"`
	// Steps say what each step did.
	Steps []StepOutcome `json:"steps"`
	// Error is set when the case could not run to its end; it then fails.
	Error string `json:"error,omitempty"`
}

// RunCases runs every case against a real ledger, each on a fresh store,
// one after the other. It returns an error only when no store can be made;
// a case that fails to run is a failed CaseResult.
func RunCases(ctx context.Context, cases []Case, o RunOptions) ([]CaseResult, error) {
	if o.DSN != "" && !pgstore.IsDSN(o.DSN) {
		return nil, errors.New("--db must be a postgres:// URL: cases always run on a fresh store, a SQLite file of their own by default")
	}
	results := make([]CaseResult, 0, len(cases))
	for i, c := range cases {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		dsn, cleanup, err := freshStore(ctx, o.DSN)
		if err != nil {
			return results, err
		}
		r := RunCase(ctx, dsn, c, o)
		cleanup()
		results = append(results, r)
		if o.Progress != nil {
			o.Progress(i+1, len(cases))
		}
	}
	return results, nil
}

// caseRetryPolicy is the lab ledger's retry policy: three attempts, so
// that "retry limit exhausted" takes three sends, and no backoff of its
// own (a random one would make a case's result depend on the draw): a
// retryable answer is due again at once, or after the destination's
// Retry-After.
var caseRetryPolicy = opledger.RetryPolicy{MaxAttempts: 3, Deadline: 72 * time.Hour}

// caseLease is the lease of every claim a case makes.
const caseLease = 30 * time.Second

// caseOptions are the options of every ledger a case opens, in the
// runner's process and in its worker processes (RunWorker) alike, so that
// a crash step judges an outcome by the same retry policy whether it runs
// in a process of its own or not: tenant, the worker's name, the lease,
// the retry policy and the lab clock now, which stands still between
// advances.
func caseOptions(tenant, worker string, lease time.Duration, now func() time.Time) opledger.Options {
	policy := caseRetryPolicy
	return opledger.Options{Tenant: tenant, Worker: worker, Lease: lease, RetryPolicy: &policy,
		Clock: func(time.Time) time.Time { return now() }}
}

// RunCase runs one case on the (empty) store dsn and compares what it
// observed with what the case expects. Only o.WorkerCommand is used.
func RunCase(ctx context.Context, dsn string, c Case, o RunOptions) CaseResult {
	res := CaseResult{Case: c}
	fail := func(err error) CaseResult {
		res.Error = err.Error()
		res.Differences = append(res.Differences, "error: "+err.Error())
		return res
	}
	w := &world{dsn: dsn, tenant: "lab", start: labStart(), offset: new(atomic.Int64), spawn: o.WorkerCommand}
	defer w.close()
	w.opts = caseOptions(w.tenant, "lab-automation", caseLease, w.now)
	l, err := opledger.Open(ctx, dsn, w.opts)
	if err != nil {
		return fail(fmt.Errorf("open ledger: %w", err))
	}
	w.ledger = l
	defer func() { _ = w.ledger.Close() }()
	d := newDestination(c.Destination, w.now)
	if err := d.Inject(c.Faults...); err != nil {
		return fail(err)
	}
	if err := w.setDestination(d); err != nil {
		return fail(err)
	}
	for _, st := range c.Steps {
		out, err := w.play(ctx, st)
		if err != nil {
			return fail(err)
		}
		res.Steps = append(res.Steps, out)
	}
	t, err := w.tally(ctx)
	if err != nil {
		return fail(err)
	}
	state, _, err := w.state(ctx)
	if err != nil {
		return fail(err)
	}
	res.Got = Expectation{Tally: t, State: state}
	res.Differences = Compare(c.Want, res.Got)
	res.Pass = len(res.Differences) == 0
	return res
}

// Compare lists the columns in which got differs from want.
func Compare(want, got Expectation) []string {
	var diffs []string
	num := func(name string, w, g int) {
		if w != g {
			diffs = append(diffs, fmt.Sprintf("%s: want %d, got %d", name, w, g))
		}
	}
	num("attempts", want.Attempts, got.Attempts)
	num("actions", want.Actions, got.Actions)
	num("verifications", want.Verifications, got.Verifications)
	num("events", want.Events, got.Events)
	num("deliveries", want.Deliveries, got.Deliveries)
	if want.State != got.State {
		diffs = append(diffs, fmt.Sprintf("state: want %s, got %s", want.State, got.State))
	}
	return diffs
}

// freshStore returns the DSN of an empty store and how to remove it: a
// SQLite file in a new temporary directory, or a new schema on the
// PostgreSQL server of base.
func freshStore(ctx context.Context, base string) (string, func(), error) {
	if base == "" {
		dir, err := os.MkdirTemp("", "opledger-lab-")
		if err != nil {
			return "", nil, err
		}
		return "sqlite:" + filepath.Join(dir, "lab.db"), func() { _ = os.RemoveAll(dir) }, nil
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "opledger_lab_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("create lab schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(ctx)
		}
	}, nil
}
