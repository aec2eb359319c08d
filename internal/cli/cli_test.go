package cli_test

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "opledger-cli-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "opledger")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/opledger")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("build opledger: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run executes the built binary and returns stdout, stderr and exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

func TestDemo(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	out, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "records created at the CRM: 5 ")
	require.Contains(t, out, "attempts sent to the CRM:   8")
	for _, state := range []string{"awaiting_approval", "pending", "in_progress", "uncertain", "held", "succeeded", "failed"} {
		require.Regexp(t, `DEMO-\S+\s+`+state, out, "the demo shows a %s operation", state)
	}
	require.Contains(t, out, "refused: same key, different content")
	require.Contains(t, out, "refused: operation is uncertain")
	require.Regexp(t, `DEMO-MAIL-017\s+held`, out)
	require.Regexp(t, `DEMO-OP-021\s+failed \(rejected\)`, out)
	require.NotContains(t, out, "demo@example.invalid", "sensitive fields never printed")

	// Its story is the first run's: on the same ledger again it would
	// narrate failures that no longer happen (every step replays). Like
	// any ledger, it is refused.
	out, errOut, code = run(t, "demo", "--db", dsn, "--no-serve")
	require.Equal(t, 2, code, out)
	require.Empty(t, out)
	require.Contains(t, errOut, "--db already holds a ledger")
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	out, errOut, code := run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^sqlite store `+regexp.QuoteMeta(dsn)+`: applied \d+ migrations \(001_init.sql, .*\); it is up to date\n$`, out)
	require.Empty(t, errOut, "no progress bar when stderr is piped")
	out, _, code = run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, "migrating twice is fine")
	require.Equal(t, "sqlite store "+dsn+" is up to date: nothing to apply\n", out, "nothing left to apply")

	// One migration left to apply (028, the newest, undone by hand): the
	// count is singular.
	db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite:"))
	require.NoError(t, err)
	for _, q := range []string{`DROP INDEX recoveries_keyed`, `DELETE FROM schema_migrations WHERE version = 28`} {
		_, err = db.Exec(q)
		require.NoError(t, err, q)
	}
	require.NoError(t, db.Close())
	out, errOut, code = run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "sqlite store "+dsn+": applied 1 migration (028_recoveries_keyed.sql); it is up to date\n", out)

	// A PostgreSQL store is named without its password.
	pg := testdb.PostgresDSN(t)
	u, err := url.Parse(pg)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
	out, errOut, code = run(t, "migrate", "--db", u.String())
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "postgres store postgres://"+u.User.Username()+":xxxxx@")
	require.Contains(t, out, "is up to date")
	require.NotContains(t, out, "s3cret-pw")
}

// TestProgressOnTerminal: long commands draw a progress bar when stderr is
// a terminal (here a pseudo-terminal) and stay quiet when it is piped
// (TestMigrate, TestLab*).
func TestProgressOnTerminal(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate", "--db", "sqlite:" + filepath.Join(t.TempDir(), "m.db")},
		{"lab", "run", "--crash-in-process", filepath.Join("..", "..", "lab", "cases.csv")},
	} {
		ptmx, tty, err := pty.Open()
		require.NoError(t, err)
		cmd := exec.Command(binary, args...)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, tty
		require.NoError(t, cmd.Start())
		terminal := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(ptmx) // ends with EIO once the tty side is closed
			terminal <- b
		}()
		require.NoError(t, cmd.Wait(), "%v", args)
		require.NoError(t, tty.Close())
		drawn := <-terminal
		require.NoError(t, ptmx.Close())
		require.Contains(t, string(drawn), args[0], "%v draws a progress bar on a terminal", args)
		require.Contains(t, string(drawn), "%", "%v draws a progress bar on a terminal", args)
		require.NotContains(t, stdout.String(), "%|", "the bar stays off stdout")
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"migrate", "--nope"}, 2, "unknown flag: --nope"},
		{[]string{"version", "extra"}, 2, "unknown command"},
		{[]string{"migrate", "--db", "mysql://x"}, 2, `--db takes sqlite:PATH or postgres://USER@HOST:PORT/DB (got a mysql: DSN)`},
		{[]string{"migrate", "--db", "sqlite:/nonexistent-dir/x/y.db"}, 1, "sqlite"},
		{[]string{"serve", "--metrics-max-age", "-1s"}, 2, "--metrics-max-age must be 0 (read on every scrape) or more, got -1s"},
	}
	for _, tc := range cases {
		out, errOut, code := run(t, tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, tc.msg)
		require.Regexp(t, `^opledger: `, errOut, "one-line message first")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, code := run(t, "version")
	require.Equal(t, 0, code)
	// Built from this checkout: "dev", or with -buildvcs a pseudo-version
	// naming its commit.
	m := regexp.MustCompile(`^opledger (dev|v0\.0\.0-\d{14}-[0-9a-f]{12}(\+dirty)?) \(ledger schema version (\d+)\)\n$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	sqlite, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	pg, err := pgstore.MigrationVersions()
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(slices.Max(sqlite)), m[3])
	require.Equal(t, slices.Max(sqlite), slices.Max(pg), "both stores are at the same schema version")
}

// TestDemoServes: after the walk-through the demo serves the ledger and
// prints the console address and a token that works.
func TestDemoServes(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "demo", "--addr", "127.0.0.1:0")
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var consoleURL, token string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && (consoleURL == "" || token == "") {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Console:  "); ok {
			consoleURL = strings.Fields(v)[0]
		}
		if v, ok := strings.CutPrefix(line, "Token:    "); ok {
			token = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, consoleURL)
	require.NotEmpty(t, token)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(consoleURL, "/")+"/v1/operations?state=held,uncertain,failed", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, key := range []string{"DEMO-MAIL-017", "DEMO-OP-021"} {
		require.Contains(t, string(body), key, "the exception queue is live")
	}
	// The server works on the lab's destinations: its reconciler confirms
	// the lost response by a lookup, its executor retries the 429.
	for _, key := range []string{"DEMO-OP-023", "DEMO-OP-025"} {
		deadline := time.Now().Add(time.Minute)
		for {
			req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(consoleURL, "/")+"/v1/operations/"+key, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var op struct {
				State string `json:"state"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&op))
			resp.Body.Close()
			if op.State == "succeeded" {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s still %s: the demo server does not work on the lab destinations", key, op.State)
			time.Sleep(100 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	resp, err = http.Get(consoleURL + "login")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the console is served")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "Ctrl-C stops the demo cleanly")
}

// TestOutputNotWritten: a command whose standard output cannot be
// written (a full disk: /dev/full) exits 1 saying so, not 0 with its
// output lost. (tokens create revokes the token it could not show.)
func TestOutputNotWritten(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full on this system")
	}
	defer full.Close()
	dsn := testdb.SQLiteDSN(t)
	_, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	for _, args := range [][]string{{"version"}, {"migrate", "--db", dsn}, {"tokens", "list", "--db", dsn, "--tenant", "acme"}} {
		cmd := exec.Command(binary, args...)
		cmd.Stdout = full
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		require.Equal(t, 1, ee.ExitCode(), "%v: %s", args, stderr.String())
		require.Contains(t, stderr.String(), "opledger: the command ran, but its output could not be written: ", "%v", args)
		require.Contains(t, stderr.String(), "no space left on device")
	}
}
