package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOpsShowJSONEmptyLists: ops show --json gives an operation's
// attempts and timeline as arrays, [] when there are none (an operation
// not claimed yet has no attempt, a compacted one neither attempt nor
// timeline), from the store as through a server, as GET
// /v1/operations/{key} does: never null, which a script iterating over
// them (jq '.attempts[]') cannot take.
func TestOpsShowJSONEmptyLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "show.db")
	var offset atomic.Int64
	l, err := opledger.Open(ctx, dsn, opledger.Options{Retention: time.Hour,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "order:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"}})
	require.NoError(t, err)
	_, err = l.Report(ctx, "order:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "CRM-1"})
	require.NoError(t, err)
	offset.Store(int64(2 * time.Hour))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:2", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	url, _ := startServe(t, dsn)
	for _, tc := range []struct {
		key   string
		empty []string
	}{
		{"order:1", []string{"attempts", "timeline"}},
		{"order:2", []string{"attempts"}},
	} {
		for _, where := range [][]string{{"--db", dsn}, {"--server", url, "--token", token}} {
			args := append([]string{"ops", "show", tc.key, "--json"}, where...)
			out, errOut, code := run(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			var doc map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
			for _, field := range tc.empty {
				require.JSONEq(t, `[]`, string(doc[field]), "%v: %s", args, field)
			}
		}
	}
}

// TestOpsStatsEmptyTenantNote: ops stats of a tenant that has no
// operation and no event at all says so on stderr, as an empty ops list
// does: all its figures 0 would read as a quiet ledger, when --tenant
// (default "default") or the token names the wrong tenant. A tenant with
// an operation, and --all-tenants, get no note; stdout is the figures
// alone.
func TestOpsStatsEmptyTenantNote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "stats.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	beta, err := l.WithTenant("beta")
	require.NoError(t, err)
	betaToken, _, err := beta.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	url, _ := startServe(t, dsn)

	for _, tc := range []struct {
		args []string
		note string
	}{
		{[]string{"--db", dsn}, `note: tenant "default" lists no operation or event at all (its figures are all 0): if you meant another tenant, --tenant names it` + "\n"},
		{[]string{"--db", dsn, "--json"}, `note: tenant "default" lists no operation or event at all (its figures are all 0): if you meant another tenant, --tenant names it` + "\n"},
		{[]string{"--server", url, "--token", betaToken}, "note: the token's tenant lists no operation or event at all (its figures are all 0): a token of another tenant lists that tenant's\n"},
		{[]string{"--db", dsn, "--tenant", "acme"}, ""},
		{[]string{"--db", dsn, "--all-tenants"}, ""},
	} {
		args := append([]string{"ops", "stats"}, tc.args...)
		out, errOut, code := run(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Equal(t, tc.note, errOut, args)
		require.NotContains(t, out, "note:", args)
	}
}

// TestDBNamesLedgerSideFile: a --db naming a file kept beside a ledger
// (its -writelock file, always there and empty, or its -wal, -shm or
// -journal file; the names a shell completes after the ledger's) is a
// usage error naming the ledger to give instead. Such a file used to be
// taken as a new, empty file: migrate, serve or tokens create made a
// second ledger inside the ledger's lock file.
func TestDBNamesLedgerSideFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+path)
	require.Equal(t, 0, code, errOut)
	lock := path + "-writelock"
	require.FileExists(t, lock)
	for _, args := range [][]string{
		{"migrate", "--db", "sqlite:" + lock},
		{"tokens", "create", "--db", "sqlite:" + lock, "--tenant", "acme"},
		{"ops", "list", "--db", "sqlite:" + lock},
		{"ops", "list", "--db", "sqlite:" + path + "-wal"},
	} {
		out, errOut, code := run(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Empty(t, out, args)
		require.Contains(t, errOut, "keeps beside the ledger "+path+": give sqlite:"+path, args)
	}
	fi, err := os.Stat(lock)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "nothing was written into the lock file")
	require.NoFileExists(t, lock+"-writelock")
	// A file of such a name that is no ledger's (no SQLite database
	// beside it without the suffix) is taken as any other.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes"), []byte("not a database"), 0o600))
	for _, other := range []string{"notes-wal", "alone-wal"} {
		_, errOut, code = run(t, "migrate", "--db", "sqlite:"+filepath.Join(dir, other))
		require.Equal(t, 0, code, "%s: %s", other, errOut)
	}
}

// TestOpsShowSameThroughServer: ops show prints an operation through a
// server as from the store: one with no saved response has no response
// line either way (through a server it used to read "response null",
// the API's JSON null taken for a response). The one difference is the
// "deduplication support" line of an operation that is not a protected
// retry, left out through a server (TestOpsShowDeduplicationSupport).
func TestOpsShowSameThroughServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "show.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "order:2", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "order:2", Action: "create", Destination: "crm"}})
	require.NoError(t, err)
	_, err = l.Report(ctx, "order:2", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "CRM-2", Response: json.RawMessage(`{"id":"CRM-2"}`)})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	url, _ := startServe(t, dsn)

	for key, response := range map[string]string{"order:1": "", "order:2": `  response {"id":"CRM-2"}` + "\n"} {
		local, errOut, code := run(t, "ops", "show", key, "--db", dsn)
		require.Equal(t, 0, code, errOut)
		remote, errOut, code := run(t, "ops", "show", key, "--server", url, "--token", token)
		require.Equal(t, 0, code, errOut)
		local = regexp.MustCompile(`(?m)^  deduplication support: +as declared by destination .*\n`).ReplaceAllString(local, "")
		require.Equal(t, local, remote, key)
		if response == "" {
			require.NotContains(t, remote, "  response ", key)
		} else {
			require.Contains(t, remote, response, key)
		}
	}
}

// TestReviseRepeatAddsSensitiveField: a revision sent again with a
// --sensitive-field the first lacked records nothing new but masks that
// field from then on (as a repeated PutWorkflow does), and says so,
// rather than "nothing changed", which read as if the field were still
// shown.
func TestReviseRepeatAddsSensitiveField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "revise.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "x", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "y", Destination: "crm", Payload: json.RawMessage(`{"r":"{steps.a.ref}"}`)},
	}})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	revise := []string{"workflows", "revise", "wf:1", "b", "--version", "2", "--payload", `{"email":"ana@example.invalid"}`, "--db", dsn}
	out, errOut, code := run(t, revise...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "revised to version 2")
	out, errOut, code = run(t, append(revise, "--sensitive-field", "email")...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "wf:1 step b: this revision was already recorded; its --sensitive-field paths are masked from now on, nothing else changed; the workflow is running\n", out)
	out, errOut, code = run(t, "workflows", "show", "wf:1", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "ana@", "the field is masked")
	// Without --sensitive-field, a repeat changed nothing.
	out, errOut, code = run(t, revise...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "wf:1 step b: this revision was already recorded, nothing changed; the workflow is running\n", out)
}

// TestDecisionOnStepNotRecorded: a decision or approval naming a
// workflow's step that is not recorded yet says so, and which step it
// waits for, with the workflows show that moves it on (where a waiting
// step is approved ahead), from the store as through a server, as ops
// show does: not a hint that the key may be in another tenant.
func TestDecisionOnStepNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "steps.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "x", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "y", Destination: "crm", Payload: json.RawMessage(`{}`), RequiresApproval: new(true)},
	}})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadWrite)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	url, _ := startServe(t, dsn)

	for _, where := range [][]string{{"--db", dsn}, {"--server", url, "--token", token}} {
		for _, decision := range [][]string{
			{"ops", "approve", "wf:1/b", "--version", "1", "--fingerprint", "sha256:00"},
			{"ops", "cancel", "wf:1/b", "--reason", "not wanted"},
			{"ops", "retry", "wf:1/b", "--reason", "again"},
			{"ops", "resolve", "wf:1/b", "--succeeded", "--ref", "R1", "--reason", "found it"},
		} {
			args := append(slices.Clone(decision), where...)
			out, errOut, code := run(t, args...)
			require.Equal(t, 1, code, "%v: %s", args, errOut)
			require.Empty(t, out, args)
			require.Contains(t, errOut, "wf:1/b is step b of workflow wf:1, not recorded yet (it waits for step a): opledger workflows show wf:1", args)
			require.NotContains(t, errOut, "another tenant", args)
		}
	}
}

// TestWorkflowCommandsOnStepKey: workflows resume, cancel, approve and
// revise given a step's key (WORKFLOW/STEP, as ops list shows it) for
// the workflow's say which workflow it is a step of, as workflows show
// does, rather than that no workflow is found in the tenant.
func TestWorkflowCommandsOnStepKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "steps.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "x", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "y", Destination: "crm", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadWrite)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	url, _ := startServe(t, dsn)

	for _, where := range [][]string{{"--db", dsn}, {"--server", url, "--token", token}} {
		for _, command := range [][]string{
			{"workflows", "resume", "wf:1/a"},
			{"workflows", "cancel", "wf:1/a", "--reason", "not wanted"},
			{"workflows", "approve", "wf:1/a", "b", "--version", "1", "--fingerprint", "sha256:00"},
			{"workflows", "revise", "wf:1/a", "b", "--version", "2", "--payload", "{}"},
		} {
			args := append(slices.Clone(command), where...)
			out, errOut, code := run(t, args...)
			require.Equal(t, 1, code, "%v: %s", args, errOut)
			require.Empty(t, out, args)
			require.Contains(t, errOut, "wf:1/a is not a workflow: it names step a of workflow wf:1: opledger workflows show wf:1", args)
		}
	}
}

// TestServeWebhookSecretEnvNotRepeated: serve --config refuses a webhook
// source whose secret_env names an unset variable, naming the variable
// when it reads as one (capitals, digits, _), but not repeating a value
// that does not, such as the signing secret pasted in its place
// (whsec_…), which the error would otherwise print.
func TestServeWebhookSecretEnvNotRepeated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		secretEnv, want string
	}{
		{"OPLEDGER_TEST_UNSET_SECRET", "environment variable OPLEDGER_TEST_UNSET_SECRET is unset or empty"},
		{"whsec_5Zq8JpT2xVfK9mN3", "the environment variable secret_env names is unset or empty"},
	} {
		config := filepath.Join(dir, "c.yaml")
		require.NoError(t, os.WriteFile(config, []byte("webhooks:\n  stripe:\n    tenant: acme\n    scheme: stripe\n    secret_env: "+tc.secretEnv+"\n"), 0o600))
		_, errOut, code := run(t, "serve", "--config", config, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "l.db"))
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, tc.want)
		if !strings.HasPrefix(tc.secretEnv, "OPLEDGER_") {
			require.NotContains(t, errOut, tc.secretEnv)
		}
		require.NoFileExists(t, filepath.Join(dir, "l.db"))
	}
}
