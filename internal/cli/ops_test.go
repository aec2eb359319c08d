package cli_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOps drives the ops commands of the built binary against a store and
// against a server, including their refusals.
func TestOps(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ops.db")
	_, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 0, code, errOut)

	out, errOut, code := run(t, "ops", "list", "--db", dsn, "--state", "held,failed")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out) // the e-mail held, the 422 failed
	require.Regexp(t, `^KEY\s+STATE\s+DESTINATION`, lines[0])
	require.Contains(t, out, "DEMO-MAIL-017")
	require.Contains(t, out, "failed (rejected)")

	// An empty list of a tenant without any operation says so: a
	// mistyped --tenant is not an empty queue.
	out, errOut, code = run(t, "ops", "list", "--db", dsn, "--state", "held", "--tenant", "acmee")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "note: tenant \"acmee\" lists no operation at all (none recorded, or all compacted by retention): if you meant another tenant, --tenant names it\n", errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, "the header alone")
	_, errOut, code = run(t, "ops", "list", "--db", dsn, "--state", "in_progress")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut, "an empty list of a tenant with operations needs no note")

	out, errOut, code = run(t, "ops", "list", "--db", dsn, "--order", "review")
	require.Equal(t, 0, code, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out) // only the held e-mail
	require.Regexp(t, `^DEMO-MAIL-017\s+held\s`, lines[1])

	out, errOut, code = run(t, "ops", "list", "--db", dsn, "--duplicate-effects")
	require.Equal(t, 0, code, errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, "the demo's destinations never act twice: the header alone\n%s", out)

	out, _, code = run(t, "ops", "list", "--db", dsn, "--json")
	require.Equal(t, 0, code)
	var n int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var op map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &op), line)
		require.NotContains(t, line, "demo@example.invalid", "sensitive fields masked")
		n++
	}
	require.Equal(t, 10, n)

	// Paging: 4 + 4 + 2, each page's cursor on stderr, the last without.
	var paged []string
	var pages []string
	for cursor := ""; ; {
		args := []string{"ops", "list", "--db", dsn, "--json", "--limit", "4"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		out, errOut, code := run(t, args...)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		pages = append(pages, strconv.Itoa(len(lines)))
		for _, line := range lines {
			var op struct{ Key string }
			require.NoError(t, json.Unmarshal([]byte(line), &op))
			paged = append(paged, op.Key)
		}
		if errOut == "" {
			break
		}
		m := regexp.MustCompile(`^more: run it again with --cursor (\S+)\n$`).FindStringSubmatch(errOut)
		require.Len(t, m, 2, errOut)
		cursor = m[1]
	}
	require.Equal(t, []string{"4", "4", "2"}, pages)
	slices.Sort(paged)
	require.Len(t, slices.Compact(paged), 10, "every operation once")
	_, errOut, code = run(t, "ops", "list", "--db", dsn, "--cursor", "nonsense")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "cursor")

	out, errOut, code = run(t, "ops", "show", "DEMO-MAIL-017", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^DEMO-MAIL-017  held since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n`, out, "the state, and since when")
	for _, want := range []string{"Timeline:", "lease expired after dispatch", "Replay decision record:",
		"operation key:", "approved version:", "current attempt:", "last confirmed step:", "destination reference:",
		"result:                 uncertain", "deduplication support:", "next decision:          ops-team decides", "reason:"} {
		require.Contains(t, out, want)
	}
	// Each attempt's own error, beside its outcome: the first attempt of
	// DEMO-OP-020 was refused for the moment, the second succeeded.
	out, errOut, code = run(t, "ops", "show", "DEMO-OP-020", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^  1 .* retryable +- +POST crm: 503 Service Unavailable$`, out)
	require.Regexp(t, `(?m)^  2 .* succeeded +crm-\d+ +-$`, out)
	// A refusal shows what the destination said, and what is left to do.
	out, errOut, code = run(t, "ops", "show", "DEMO-OP-021", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `  response {"error":"injected: validation failed, nothing was done"}`)
	require.Contains(t, out, "repair the cause, then authorize a retry; left as it is, nothing more is sent")
	out, _, code = run(t, "ops", "show", "DEMO-OP-017", "--db", dsn, "--json")
	require.Equal(t, 0, code)
	var shown struct {
		Decision map[string]string `json:"replay_decision"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "succeeded", shown.Decision["result"])
	require.NotContains(t, out, "demo@example.invalid")

	// Refusals: no reason, no ref, unknown key, wrong state.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"ops", "retry", "DEMO-MAIL-017"}, 2, "--reason is required"},
		{[]string{"ops", "cancel", "DEMO-MAIL-017", "--reason", " "}, 2, "--reason is required"},
		{[]string{"ops", "cancel", "DEMO-MAIL-017", "--reason", "x", "--operator", " "}, 2, "--operator is empty"},
		{[]string{"ops", "resolve", "DEMO-MAIL-017", "--succeeded", "--reason", "x"}, 2, "--ref is required"},
		{[]string{"ops", "resolve", "DEMO-MAIL-017", "--ref", "M1", "--reason", "x"}, 2, "needs --succeeded"},
		{[]string{"ops", "show", "nope"}, 1, `operation not found in tenant "default" (if it is in another tenant, --tenant names that one)`},
		{[]string{"ops", "show", "DEMO-OP-017", "--tenant", "acme"}, 1, `operation not found in tenant "acme" (if it is in another tenant, --tenant names that one)`},
		{[]string{"ops", "cancel", "nope", "--reason", "x"}, 1, `cancel nope: operation not found in tenant "default" (if it is in another tenant, --tenant names that one)`},
		{[]string{"ops", "show", "a@b"}, 2, "personal data"},
		{[]string{"ops", "retry", "DEMO-OP-017", "--reason", "x"}, 1, "operation is succeeded: authorize_retry applies to an operation that is held, uncertain, or failed"},
		{[]string{"ops", "cancel", "DEMO-OP-021", "--reason", "x"}, 1, "operation is failed: cancel applies to an operation that is held, uncertain, pending, or awaiting_approval"},
		{[]string{"ops", "list", "--server", "http://127.0.0.1:1"}, 2, "--db is for the store"},
		{[]string{"ops", "cancel", "DEMO-OP-021", "--reason", "x", "--server", "", "--token", "opl_x"}, 2, "--server is empty: give the server's URL"},
		{[]string{"ops", "list", "--token", "opl_x"}, 2, "--token is for --server"},
		{[]string{"events", "list", "--server", ""}, 2, "--server is empty"},
		{[]string{"events", "list", "--token", ""}, 2, "--token is empty"},
		{[]string{"ops", "list", "--order", "oldest"}, 2, `--order: unknown order "oldest"`},
		{[]string{"ops", "list", "--order", "review", "--state", "failed"}, 2, `order "review" lists held operations only`},
	} {
		args := append(tc.args, "--db", dsn)
		out, errOut, code := run(t, args...)
		require.Equal(t, tc.code, code, "%v: %s%s", tc.args, out, errOut)
		require.Contains(t, errOut, tc.msg, tc.args)
	}

	out, errOut, code = run(t, "ops", "resolve", "DEMO-MAIL-017", "--db", dsn, "--succeeded", "--ref", "MSG-1", "--reason", "provider log shows MSG-1 delivered", "--operator", "maria")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-MAIL-017 is now succeeded\n", out)
	// Sent again, as a script does when it lost the answer: exit 0, and
	// it says nothing changed. Other words are a new decision, refused.
	out, errOut, code = run(t, "ops", "resolve", "DEMO-MAIL-017", "--db", dsn, "--succeeded", "--ref", "MSG-1", "--reason", "provider log shows MSG-1 delivered", "--operator", "maria")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-MAIL-017 is succeeded: this decision was already recorded, nothing changed\n", out)
	_, errOut, code = run(t, "ops", "resolve", "DEMO-MAIL-017", "--db", dsn, "--succeeded", "--ref", "MSG-2", "--reason", "provider log shows MSG-2 delivered", "--operator", "maria")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "operation is succeeded")
	out, errOut, code = run(t, "ops", "show", "DEMO-MAIL-017", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Contains(t, out, "maria (command line on "+host+")", "a decision on the store names where it came from")
	out, errOut, code = run(t, "ops", "retry", "DEMO-OP-021", "--db", dsn, "--reason", "units fixed upstream")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-OP-021 is now pending\n", out)

	// The same through a server.
	out, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "default")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	url, _ := startServe(t, dsn)
	out, errOut, code = run(t, "ops", "list", "--server", url, "--token", token, "--state", "pending")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "DEMO-OP-021")
	out, errOut, code = run(t, "ops", "cancel", "DEMO-OP-021", "--server", url, "--token", token, "--reason", "order withdrawn")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-OP-021 is now failed (cancelled)\n", out)
	out, errOut, code = run(t, "ops", "cancel", "DEMO-OP-021", "--server", url, "--token", token, "--reason", "order withdrawn")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-OP-021 is failed (cancelled): this decision was already recorded, nothing changed\n", out)
	out, errOut, code = run(t, "ops", "show", "DEMO-OP-021", "--server", url, "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "operator cancelled")
	require.Regexp(t, `\(token [^,]+, tok_\w+\)`, out, "a decision through the server names its token")
	require.Contains(t, out, "order withdrawn")
	_, errOut, code = run(t, "ops", "list", "--server", url, "--token", "opl_wrong")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unauthorized")
	resp, err := http.Get(url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
}

func TestHelpHasExamples(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"version"}, {"tokens"}, {"ops"}, {"serve"}, {"tokens", "create"}, {"tokens", "list"}, {"tokens", "revoke"}, {"migrate"}, {"backup"},
		{"demo"}, {"bench"}, {"events"}, {"events", "list"}, {"events", "show"}, {"ops", "list"}, {"ops", "show"}, {"ops", "resolve"}, {"ops", "retry"}, {"ops", "cancel"}, {"ops", "approve"}} {
		out, _, code := run(t, append(args, "--help")...)
		require.Equal(t, 0, code, args)
		require.Contains(t, out, "Examples:", "%v --help has examples", args)
	}
	out, _, code := run(t, "completion", "bash")
	require.Equal(t, 0, code)
	require.Contains(t, out, "bash completion")
}

// TestBench runs a short bench on a fresh SQLite ledger and checks the
// JSON cells; figures are not asserted (they are measurements).
func TestBench(t *testing.T) {
	t.Parallel()
	out, errOut, code := run(t, "bench", "--duration", "300ms", "--concurrency", "1,2", "--json")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	for i, line := range lines {
		var cell map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &cell))
		for _, field := range []string{"mode", "keys", "store", "concurrency", "ops", "ops_per_sec", "p50_ms", "p99_ms", "floor_ops_per_sec", "ratio_to_floor",
			"batched_floor_ops_per_sec", "reference_ops_per_sec", "reference_p99_ms", "ratio_to_reference",
			"batched_reference_ops_per_sec", "batched_reference_p99_ms", "ratio_to_batched_reference", "writer_busy", "writes_per_batch", "rss_mb"} {
			require.Contains(t, cell, field)
		}
		require.EqualValues(t, []int{1, 2}[i], cell["concurrency"])
		require.Equal(t, "sqlite", cell["store"])
		require.Positive(t, cell["ops"], "protected operations completed")
		require.Positive(t, cell["floor_ops_per_sec"])
		require.Positive(t, cell["reference_ops_per_sec"])
		require.Positive(t, cell["batched_reference_ops_per_sec"])
	}
	_, errOut, code = run(t, "bench", "--concurrency", "0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--concurrency")
	_, errOut, code = run(t, "bench", "--keys", "uuid")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `--keys takes sequential or random (got "uuid")`)
	_, errOut, code = run(t, "bench", "--rounds", "0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--rounds takes a whole number from 1 to 100 (got 0)")
	_, errOut, code = run(t, "bench", "--cpu-profile", "")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--cpu-profile is empty: give a file, or leave the flag out")
	existing := filepath.Join(t.TempDir(), "existing.db")
	require.NoError(t, os.WriteFile(existing, []byte("kept"), 0o600))
	for _, args := range [][]string{{}, {"--mode", "http", "--serve-rss", "2"}} {
		_, errOut, code = run(t, append([]string{"bench", "--db", "sqlite:" + existing, "--concurrency", "1"}, args...)...)
		require.Equal(t, 2, code, "an existing file is the caller's mistake: %s", errOut)
		require.Contains(t, errOut, "bench needs a fresh ledger: "+existing+" exists")
	}
	// --cpu-profile never empties a file that is not a profile (a path
	// mistyped for the ledger's), and leaves none when nothing ran.
	_, errOut, code = run(t, "bench", "--duration", "100ms", "--concurrency", "1", "--cpu-profile", existing)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--cpu-profile "+existing+" exists and is not a CPU profile: give a new file")
	unused := filepath.Join(t.TempDir(), "unused.out")
	_, _, code = run(t, "bench", "--db", "sqlite:"+existing, "--concurrency", "1", "--cpu-profile", unused)
	require.Equal(t, 2, code)
	require.NoFileExists(t, unused, "a refused run leaves no profile")
	kept, err := os.ReadFile(existing)
	require.NoError(t, err)
	require.Equal(t, "kept", string(kept))

	// --rounds: one cell per concurrency, the median of its rounds, with
	// each round's own ratio to the floor.
	out, errOut, code = run(t, "bench", "--duration", "200ms", "--concurrency", "2", "--rounds", "3", "--json")
	require.Equal(t, 0, code, errOut)
	var rounds struct {
		Rounds             int       `json:"rounds"`
		RatioToFloor       float64   `json:"ratio_to_floor"`
		RatioToFloorRounds []float64 `json:"ratio_to_floor_rounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &rounds), out)
	require.Equal(t, 3, rounds.Rounds)
	require.Len(t, rounds.RatioToFloorRounds, 3)
	sorted := slices.Sorted(slices.Values(rounds.RatioToFloorRounds))
	require.Equal(t, sorted[1], rounds.RatioToFloor, "the median of the rounds' ratios")

	out, errOut, code = run(t, "bench", "--duration", "300ms", "--concurrency", "2", "--keys", "random", "--json")
	require.Equal(t, 0, code, errOut)
	var cell map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &cell))
	require.Equal(t, "random", cell["keys"])
	require.Positive(t, cell["ops"])

	// Without --json: a line naming the run, then each workload of each
	// concurrency on its own row, compared with the protected operations.
	profile := filepath.Join(t.TempDir(), "cpu.out")
	out, errOut, code = run(t, "bench", "--duration", "300ms", "--concurrency", "2", "--cpu-profile", profile)
	require.Equal(t, 0, code, errOut)
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Equal(t, "opledger bench: library mode, sqlite store, sequential keys, an empty ledger", lines[0])
	require.Empty(t, lines[1])
	require.Regexp(t, `^\s+c\s+workload\s+ops/s\s+p50 ms\s+p99 ms\s+protected ÷\s+rss MB$`, lines[2])
	require.Len(t, lines, 8, "the header and five workloads at c=2:\n%s", out)
	require.Regexp(t, `^\s+2\s+protected operations\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+$`, lines[3])
	for i, name := range []string{"floor: one plain INSERT", "batched floor", "reference: claim \\+ complete, single writer", "batched reference"} {
		require.Regexp(t, `^\s+2\s+`+name+`\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d$`, lines[4+i])
	}

	// The http mode adds the library, measured in the same round, to the
	// workloads it is compared with.
	out, errOut, code = run(t, "bench", "--mode", "http", "--duration", "200ms", "--concurrency", "2")
	require.Equal(t, 0, code, errOut)
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Equal(t, "opledger bench: http mode, sqlite store, sequential keys, an empty ledger", lines[0])
	require.Len(t, lines, 9, "the header, five workloads and the library at c=2:\n%s", out)
	require.Regexp(t, `^\s+2\s+library: the same operations in process\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d$`, lines[8])
	out, errOut, code = run(t, "bench", "--mode", "http", "--duration", "200ms", "--concurrency", "2", "--json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &cell))
	for _, field := range []string{"library_ops_per_sec", "library_p99_ms", "ratio_to_library"} {
		require.Positive(t, cell[field], field)
	}

	data, err := os.ReadFile(profile)
	require.NoError(t, err)
	require.Greater(t, len(data), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, data[:2], "a gzipped pprof profile")
	_, errOut, code = run(t, "bench", "--duration", "100ms", "--concurrency", "1", "--json", "--cpu-profile", profile)
	require.Equal(t, 0, code, "an earlier profile is overwritten: %s", errOut)
}

// TestBenchServeRSS runs bench --serve-rss with a small N: the child serve
// (this test's built binary) takes exactly N operations through its API,
// both memory readings are there, and the child stopped cleanly on SIGTERM
// (the command fails otherwise).
func TestBenchServeRSS(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "rss.db")
	out, errOut, code := run(t, "bench", "--mode", "http", "--serve-rss", "2000", "--concurrency", "4", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	var r struct {
		Mode         string  `json:"mode"`
		Store        string  `json:"store"`
		Concurrency  int     `json:"concurrency"`
		Ops          int64   `json:"ops"`
		RSSHalfMB    float64 `json:"rss_half_mb"`
		RSSEndMB     float64 `json:"rss_end_mb"`
		RSSGrowthPct float64 `json:"rss_growth_pct"`
		RSSPeakMB    float64 `json:"rss_peak_mb"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.Equal(t, "http", r.Mode)
	require.Equal(t, "sqlite", r.Store)
	require.Equal(t, 4, r.Concurrency)
	require.EqualValues(t, 2000, r.Ops)
	require.Positive(t, r.RSSHalfMB)
	require.Positive(t, r.RSSEndMB)
	require.GreaterOrEqual(t, r.RSSPeakMB, r.RSSEndMB)
	require.InDelta(t, (r.RSSEndMB-r.RSSHalfMB)/r.RSSHalfMB*100, r.RSSGrowthPct, 1e-9)
	_, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:"))
	require.True(t, os.IsNotExist(err), "the bench's ledger is removed afterwards")

	for _, args := range [][]string{
		{"--serve-rss", "1000"},                    // library mode
		{"--mode", "http", "--serve-rss", "1"},     // too few
		{"--mode", "proxy", "--serve-rss", "1000"}, // not the API
		{"--mode", "http", "--serve-rss", "1000", "--preload", "10"},
		{"--mode", "http", "--serve-rss", "1000", "--keys", "random"},
		{"--mode", "http", "--serve-rss", "1000", "--rounds", "3"},
	} {
		_, errOut, code = run(t, append([]string{"bench"}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "--serve-rss N takes --mode http")
	}
}

// TestOpsApprove approves the demo's operation awaiting approval with the
// version and fingerprint ops show gives, on the store and through a
// server, and refuses approvals of other content or with missing flags.
func TestOpsApprove(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "approve.db")
	_, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 0, code, errOut)
	out, errOut, code := run(t, "ops", "show", "DEMO-OP-022", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	var shown struct {
		Operation struct {
			State       string `json:"state"`
			Version     int64  `json:"version"`
			Fingerprint string `json:"fingerprint"`
		} `json:"operation"`
		Decision map[string]string `json:"replay_decision"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "awaiting_approval", shown.Operation.State)
	version, fp := strconv.FormatInt(shown.Operation.Version, 10), shown.Operation.Fingerprint
	require.Contains(t, shown.Decision["reason"], "opledger ops approve DEMO-OP-022 --version "+version+" --fingerprint "+fp,
		"ops show says how to approve it")

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--fingerprint", fp}, 2, "--version is required"},
		{[]string{"--version", version}, 2, "--fingerprint is required"},
		{[]string{"--version", version, "--fingerprint", fp, "--approver", " "}, 2, "--approver is empty"},
		{[]string{"--version", version, "--fingerprint", "sha256:00"}, 1, "the approval names sha256:00, other content"},
		{[]string{"--version", "9", "--fingerprint", fp}, 1, "the approval names version 9"},
	} {
		_, errOut, code := run(t, append([]string{"ops", "approve", "DEMO-OP-022", "--db", dsn}, tc.args...)...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.msg, tc.args)
	}
	out, errOut, code = run(t, "ops", "show", "DEMO-OP-022", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"state": "awaiting_approval"`, "refused approvals change nothing")

	approve := []string{"ops", "approve", "DEMO-OP-022", "--db", dsn, "--version", version, "--fingerprint", fp, "--approver", "lea"}
	out, errOut, code = run(t, approve...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-OP-022 is now pending: version "+version+" approved\n", out)
	// Sent again, its answer lost: exit 0, nothing changed.
	out, errOut, code = run(t, approve...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "DEMO-OP-022 is pending: this approval was already recorded, nothing changed\n", out)

	// Through a server: another approver is another approval, refused
	// now that the operation awaits none.
	out, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "default")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	url, _ := startServe(t, dsn)
	_, errOut, code = run(t, "ops", "approve", "DEMO-OP-022", "--server", url, "--token", token, "--version", version, "--fingerprint", fp, "--approver", "lea")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "operation is")
	out, errOut, code = run(t, "ops", "show", "DEMO-OP-022", "--server", url, "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `lea \(command line on [^)]*\)\s+approved \[awaiting_approval → pending\]`, out)
}

// TestOpsShowTombstone: ops show of a compacted operation says what
// retention kept (dates, version, reference) and that the rest was
// removed, rather than empty tables and an empty destination.
func TestOpsShowTombstone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "tomb.db")
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
	require.NoError(t, l.Close())

	out, errOut, code := run(t, "ops", "show", "order:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^order:1  succeeded, compacted by retention\n  recorded \S+, finished \S+\n  version 1, sha256:[0-9a-f]+\n  destination reference CRM-1\n  attempts 1\n`, out)
	require.Contains(t, out, "its payload, attempts and timeline were removed")
	require.Contains(t, out, "Next decision: none (compacted by retention")
	require.NotContains(t, out, "Attempts:")
	out, errOut, code = run(t, "ops", "show", "order:1", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"deduplication_support": "none needed: no attempt will follow"`)
}

// TestOpsStats: ops stats prints the tenant's figures as the ledger
// counts them, from the store (--db) and through a server (--server),
// as a list and as GET /v1/stats' object (--json).
func TestOpsStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "stats.db")
	_, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 0, code, errOut)
	l, err := opledger.Open(ctx, dsn, opledger.Options{ExistingOnly: true})
	require.NoError(t, err)
	want, err := l.Stats(ctx, false)
	require.NoError(t, err)
	events, err := l.EventStats(ctx, false)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.Positive(t, want.OperationsByState[opledger.StateAwaitingApproval], "the demo leaves one awaiting approval")

	out, errOut, code := run(t, "ops", "stats", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	for _, s := range opledger.States {
		require.Regexp(t, `(?m)^  `+string(s)+` +`+strconv.Itoa(want.OperationsByState[s])+`$`, out)
	}
	require.Regexp(t, `(?m)^Unresolved \(uncertain \+ held\): +`+strconv.Itoa(want.Unresolved)+`$`, out)
	require.Regexp(t, `(?m)^Technical attempts: +`+strconv.Itoa(want.AttemptsTotal)+`$`, out)
	require.Regexp(t, `(?m)^Confirmed effects: +`+strconv.Itoa(want.ConfirmedEffects)+`$`, out)
	require.Regexp(t, `(?m)^Events received: +`+strconv.Itoa(events.Events)+`$`, out)
	require.Regexp(t, `(?m)^Events kept \(not yet forgotten by retention\): +`+strconv.Itoa(events.Kept)+`$`, out)
	require.Regexp(t, `(?m)^Longest wait for an approval: +[0-9][0-9hms]*$`, out, "one waits, so the wait is a duration")
	empty := "sqlite:" + filepath.Join(t.TempDir(), "empty.db")
	_, errOut, code = run(t, "migrate", "--db", empty)
	require.Equal(t, 0, code, errOut)
	out, errOut, code = run(t, "ops", "stats", "--db", empty)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^Longest wait for an approval: +- \(none awaits\)$`, out)
	require.Regexp(t, `(?m)^Longest wait for a worker: +- \(none pending\)$`, out)

	type figures struct {
		ByState   map[string]int `json:"operations_by_state"`
		Attempts  int            `json:"attempts_total"`
		Confirmed int            `json:"confirmed_effects"`
		Approval  float64        `json:"oldest_approval_wait_seconds"`
		Events    struct {
			Events     int `json:"events"`
			Deliveries int `json:"deliveries"`
		} `json:"events"`
	}
	read := func(args ...string) figures {
		t.Helper()
		out, errOut, code := run(t, append([]string{"ops", "stats", "--json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, 1, strings.Count(out, "\n"), "one JSON object on one line")
		var f figures
		require.NoError(t, json.Unmarshal([]byte(out), &f))
		return f
	}
	local := read("--db", dsn)
	require.Equal(t, want.AttemptsTotal, local.Attempts)
	require.Equal(t, want.ConfirmedEffects, local.Confirmed)
	require.Equal(t, events.Deliveries, local.Events.Deliveries)

	out, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "default", "--read-only")
	require.Equal(t, 0, code, errOut)
	url, _ := startServe(t, dsn)
	remote := read("--server", url, "--token", strings.TrimSpace(out))
	require.Equal(t, local.ByState, remote.ByState, "the same figures through the server")
	require.Equal(t, local.Attempts, remote.Attempts)
	require.Equal(t, local.Events, remote.Events)
	require.GreaterOrEqual(t, remote.Approval, local.Approval, "the wait has only grown")

	// --all-tenants counts another tenant's operation too, with --db only.
	_, errOut, code = run(t, "ops", "stats", "--all-tenants", "--server", url, "--token", strings.TrimSpace(out))
	require.Equal(t, 2, code)
	require.Equal(t, "opledger: --all-tenants reads the store itself (--db): a server answers for its token's tenant only (its /metrics counts every tenant) (see opledger ops stats --help)\n", errOut)
	_, errOut, code = run(t, "ops", "stats", "--all-tenants", "--db", dsn, "--tenant", "beta")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--all-tenants counts every tenant: leave out --tenant")
	l, err = opledger.Open(ctx, dsn, opledger.Options{ExistingOnly: true})
	require.NoError(t, err)
	beta, err := l.WithTenant("beta")
	require.NoError(t, err)
	_, _, err = beta.Record(ctx, opledger.Intent{Key: "b:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	all, tenant := read("--db", dsn, "--all-tenants"), read("--db", dsn)
	require.Equal(t, local.ByState, tenant.ByState, "the tenant's own figures leave beta out")
	require.Equal(t, local.ByState["pending"]+1, all.ByState["pending"], "beta's pending operation counted")
	require.Equal(t, local.Attempts, all.Attempts)
}

// TestServerTokenWithLineEnd: a token that holds a line end or another
// control character (OPLEDGER_TOKEN read from a file saved with CRLF, a
// --token pasted with its newline) can be sent in no request: it is a
// usage error naming where it came from, not "no answer from the
// server", which reads as a server that is down, and the token is not
// repeated.
func TestServerTokenWithLineEnd(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "tok.db")
	token, _, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code)
	token = strings.TrimSuffix(token, "\n")
	url, _ := startServe(t, dsn)

	out, errOut, code := runEnv(t, []string{"OPLEDGER_TOKEN=" + token}, "ops", "list", "--server", url)
	require.Equal(t, 0, code, "the token as it is works: %s", errOut)
	require.True(t, strings.HasPrefix(out, "KEY"), out)

	for _, c := range []struct {
		env  []string
		args []string
		from string
	}{
		{[]string{"OPLEDGER_TOKEN=" + token + "\r"}, nil, "OPLEDGER_TOKEN"},
		{nil, []string{"--token", token + "\n"}, "--token"},
	} {
		for _, cmd := range [][]string{{"ops", "list"}, {"ops", "resolve", "k1", "--succeeded", "--ref", "r", "--reason", "found"}, {"events", "list"}, {"workflows", "list"}} {
			args := append(append(cmd, "--server", url), c.args...)
			out, errOut, code := runEnv(t, c.env, args...)
			require.Equal(t, 2, code, "%v: %s%s", args, out, errOut)
			require.Empty(t, out)
			require.Equal(t, "opledger: "+c.from+" holds a control character or a space (a line end copied with the token?): an API token has none", usageLine(t, errOut), args)
			require.NotContains(t, errOut, token[4:], "the token is not repeated")
		}
	}
}

// TestOpsStatsPendingNoneDue: with operations pending but none due yet
// (each waits for its retry time), ops stats says none is due instead of
// a wait of 0s, which reads as one due right now; the figure of GET
// /v1/stats stays 0, as documented.
func TestOpsStatsPendingNoneDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "notdue.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	in := opledger.Intent{Key: "order:1", Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)}
	c, err := l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in})
	require.NoError(t, err)
	op, err := l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, RetryAfter: time.Hour})
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	st, err := l.Stats(ctx, false)
	require.NoError(t, err)
	require.Equal(t, 1, st.OperationsByState[opledger.StatePending])
	require.Zero(t, st.OldestDueSeconds, "not due for an hour")
	require.NoError(t, l.Close())

	out, errOut, code := run(t, "ops", "stats", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^Longest wait for a worker: +- \(none due\)$`, out)
}
