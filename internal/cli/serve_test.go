package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/webhook"
)

// startServe runs 'opledger serve' on a free loopback port and returns its
// base URL and the process.
func startServe(t *testing.T, dsn string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn)
	return serveURL(t, cmd), cmd
}

// serveURL starts a serve command and returns the URL it reports.
func serveURL(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	return startedURL(t, cmd, io.Discard)
}

// startedURL starts a serve or proxy command, returns the URL it reports
// and copies the rest of its log to logs.
func startedURL(t *testing.T, cmd *exec.Cmd, logs io.Writer) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urlRe := regexp.MustCompile(`msg=(?:serving|proxying) (?:\S+ )*?url=(http://\S+)`)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		_, _ = fmt.Fprintln(logs, sc.Text())
		if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
			// On with the same scanner: lines it has read past this one
			// (a warning logged just after) are in its buffer, not in
			// the pipe.
			go func() {
				for sc.Scan() {
					_, _ = fmt.Fprintln(logs, sc.Text())
				}
				_, _ = io.Copy(logs, stderr)
			}()
			return m[1]
		}
	}
	t.Fatalf("%s never reported its address", cmd.Args[1])
	return ""
}

// TestServeSIGTERM sends SIGTERM while clients are writing: in-flight
// requests either complete or fail cleanly (never a 5xx), the process exits
// 0, and after a restart every acknowledged write is there.
func TestServeSIGTERM(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			dsn := st.NewDSN(t)
			out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
			require.Equal(t, 0, code, errOut)
			token := strings.TrimSpace(out)
			url, cmd := startServe(t, dsn)

			var (
				mu       sync.Mutex
				acked    []string
				bad      []string
				ackCount atomic.Int64
			)
			reached := make(chan struct{})
			hc := &http.Client{Timeout: 10 * time.Second}
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						key := fmt.Sprintf("term:%02d:%05d", g, i)
						req, _ := http.NewRequest(http.MethodPut, url+"/v1/operations/"+key,
							bytes.NewReader([]byte(`{"action":"crm.create","destination":"crm","payload":{"i":1}}`)))
						req.Header.Set("Authorization", "Bearer "+token)
						resp, err := hc.Do(req)
						if err != nil {
							return // the server is gone: a clean failure, nothing acknowledged
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						switch {
						case resp.StatusCode == http.StatusCreated:
							acked = append(acked, key)
							if ackCount.Add(1) == 300 {
								close(reached)
							}
						case resp.StatusCode >= 500:
							bad = append(bad, fmt.Sprintf("%s: %d", key, resp.StatusCode))
						}
						mu.Unlock()
					}
				}()
			}
			select {
			case <-reached:
			case <-time.After(2 * time.Minute):
				t.Fatalf("no progress: %d writes acknowledged", ackCount.Load())
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			wg.Wait()
			err := cmd.Wait()
			require.NoError(t, err, "serve exits 0 after SIGTERM")
			require.Empty(t, bad, "no request failed with a 5xx during shutdown")

			l, err := opledger.Open(context.Background(), dsn, opledger.Options{Tenant: "acme"})
			require.NoError(t, err)
			defer l.Close()
			for _, key := range acked {
				_, err := l.Get(context.Background(), key)
				require.NoError(t, err, "acknowledged write %s is missing", key)
			}
			t.Logf("%d writes acknowledged before and during shutdown, all present", len(acked))

			// The server starts again on the same store.
			url2, _ := startServe(t, dsn)
			resp, err := http.Get(url2 + "/readyz")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		})
	}
}

// TestServeConfig: --config loads event rules and a webhook source whose
// secret comes from the environment; a signed webhook becomes an
// operation, an unsigned one is 401. A broken config stops serve with a
// one-line error.
func TestServeConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(`
rules:
  - name: paid
    source: stripe
    type: invoice.paid
    operations:
      - key: "stripe:{data.data.object.id}:receipt"
        action: email.send_receipt
        destination: email
        payload: {invoice: "{data.data.object.id}"}
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "opledger.yaml"), []byte(`
rules: rules.yaml
webhooks:
  stripe:
    tenant: acme
    scheme: stripe
    secret_env: TEST_STRIPE_SECRET
    tolerance: 5m
`), 0o644))
	dsn := "sqlite:" + filepath.Join(dir, "l.db")
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", filepath.Join(dir, "opledger.yaml"))
	cmd.Env = append(os.Environ(), "TEST_STRIPE_SECRET=whsec_cli_test")
	url := serveURL(t, cmd)

	body := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_9"}}}`)
	post := func(sig string, body []byte) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/webhooks/stripe", bytes.NewReader(body))
		if sig != "" {
			req.Header.Set(webhook.StripeHeader, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, post("", body))
	require.Equal(t, http.StatusCreated, post(webhook.SignStripe([]byte("whsec_cli_test"), time.Now(), body), body))
	require.Equal(t, http.StatusOK, post(webhook.SignStripe([]byte("whsec_cli_test"), time.Now(), body), body), "a duplicate delivery")
	other := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_9","note":"changed"}}}`)
	require.Equal(t, http.StatusOK, post(webhook.SignStripe([]byte("whsec_cli_test"), time.Now(), other), other), "a duplicate with another payload")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	out, errOut, code := run(t, "ops", "show", "stripe:in_9:receipt", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "pending")
	out, errOut, code = run(t, "events", "list", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `stripe\s+evt_1\s+invoice.paid\s+applied\s+1`, out)
	require.Empty(t, errOut)
	_, errOut, code = run(t, "events", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "note: tenant \"default\" lists no event at all: if you meant another tenant, --tenant names it\n", errOut,
		"the webhook's events are acme's, not the default tenant's")
	out, errOut, code = run(t, "events", "show", "stripe", "evt_1", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "Deliveries (3):")
	require.Contains(t, out, "duplicate\n")
	require.Contains(t, out, "duplicate, payload differs from the first delivery's\n")
	require.Contains(t, out, "stripe:in_9:receipt")
	_, errOut, code = run(t, "events", "show", "stripe", "--db", dsn)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "give the source and the event id")

	// Broken configurations.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("rulez: x\n"), 0o644))
	_, errOut, code = run(t, "serve", "--db", dsn, "--config", filepath.Join(dir, "bad.yaml"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "yaml: line 1: unknown field rulez (did you mean rules?)\n")
	_, errOut, code = run(t, "serve", "--db", dsn, "--config", filepath.Join(dir, "opledger.yaml"))
	require.Equal(t, 1, code, "the secret's variable is unset")
	require.Contains(t, errOut, "TEST_STRIPE_SECRET")
}

// TestServeConsoleSession: with --secure-cookie the console's session
// cookie is Secure, and a session lives in the ledger, so it outlasts a
// restart of the server.
func TestServeConsoleSession(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	serve := func() (string, *exec.Cmd) {
		cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--secure-cookie")
		return serveURL(t, cmd), cmd
	}

	base, cmd := serve()
	resp, err := hc.PostForm(base+"/login", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].Secure, "--secure-cookie")
	require.True(t, cookies[0].HttpOnly)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())

	base, _ = serve()
	req, err := http.NewRequest(http.MethodGet, base+"/dashboard", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: cookies[0].Name, Value: cookies[0].Value})
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the session outlasts the restart")
}

// TestServeLedgerFlags: --hold-review sets the review time of the
// operations serve holds; retention flags must be positive.
func TestServeLedgerFlags(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	// The shortest --retention and --sweep-interval taken.
	base := serveURL(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--hold-review", "90m",
		"--retention", "1m", "--sweep-interval", "100ms", "--lease", "7m"))
	c := client.New(base, strings.TrimSpace(out), nil)
	ctx := context.Background()
	in := client.Intent{Action: "email.send", Destination: "email", Payload: []byte(`{"template":"welcome"}`), Owner: "ops-team"}
	claim, err := c.Claim(ctx, "mail:welcome:u1", client.ClaimRequest{Intent: &in, Dispatch: true})
	require.NoError(t, err)
	// A claim through the API that names no lease gets --lease.
	require.Equal(t, 7*time.Minute, claim.LeaseExpiresAt.Sub(claim.Operation.UpdatedAt), "the server's lease, from the claim")
	_, err = c.Report(ctx, "mail:welcome:u1", claim.AttemptID, client.Report{FencingToken: claim.FencingToken,
		Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	op, _, err := c.Reconcile(ctx, "mail:welcome:u1", client.Finding{Evidence: "no lookup"})
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State)
	require.NotNil(t, op.ReviewBy)
	require.Equal(t, 90*time.Minute, op.ReviewBy.Sub(op.UpdatedAt), "review_by is --hold-review after the hold")

	for _, args := range [][]string{
		{"serve", "--hold-review", "0s"},
		{"serve", "--retention", "-24h"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--tombstone-retention", "0s"},
	} {
		out, errOut, code := run(t, append(args, "--db", dsn)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Regexp(t, `^opledger: --[a-z-]+ must be more than 0, got -?[0-9hms.]+ \(see opledger [a-z]+ --help\)\n$`, errOut, args)
	}
}

// runGuarded is run for a command that must end at once: it is killed
// after a minute (a regression, such as reading /dev/zero without end,
// would otherwise hang the test) and the test fails.
func runGuarded(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%v did not end: killed", args)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errOut.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

// TestServeConfigRefusedBeforeOpening: a configuration serve refuses is
// refused before the ledger is opened, so that no SQLite file and no
// PostgreSQL table is created: a webhook tenant outside the key syntax
// (which only the API used to check, once the ledger was open), a second
// YAML document, a file larger than 4 MiB or that is not a regular file
// (/dev/zero used to be read without end), and a destination timeout that
// the executor's call limit would cut (the effect would happen but the
// attempt end uncertain). Each is one line, exit 1.
func TestServeConfigRefusedBeforeOpening(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	const dests = "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    ref: /id\n    timeout: 25s\n"
	write("slow.yaml", dests)
	write("typo-dests.yaml", "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    ref: /id\n    timout: 5s\n")
	write("typo-rules.yaml", "rules:\n  - nme: x\n")
	write("spaced-dests.yaml", "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    ref: /id\n    time out: 5s\n")
	write("two-mistakes.yaml", "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    ref: /id\n    timeout: 10\n    bogus: 1\n")
	write("mistakes-reversed.yaml", "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    bogus: 1\n    ref: /id\n    retry: {max_delay: 1d}\n")
	write("empty-rules.yaml", "# no rules yet\n")
	write("big.yaml", "# "+strings.Repeat("x", 4<<20)+"\n")
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")))
	webhook := func(tenant string) string {
		return "webhooks:\n  stripe: {tenant: " + tenant + ", scheme: stripe, secret_env: HOME}\n"
	}
	for _, tc := range []struct {
		config, msg string
	}{
		{write("space.yaml", webhook(`"bad tenant"`)), "opledger: config " + filepath.Join(dir, "space.yaml") + ": line 2: webhooks.stripe: tenant takes a name in the operation key syntax: key may contain only letters"},
		{write("nul.yaml", webhook(`"a\0b"`)), "opledger: config " + filepath.Join(dir, "nul.yaml") + ": line 2: webhooks.stripe: tenant takes a name in the operation key syntax"},
		{write("approval.yaml", "require_approval: [payments, \"pay ments\"]\n"), "opledger: config " + filepath.Join(dir, "approval.yaml") + ": line 1: require_approval: entry 2 takes a destination name, in the operation key syntax: key may contain only letters"},
		{write("owners.yaml", "owners: {payments: \" \"}\n"), "opledger: config " + filepath.Join(dir, "owners.yaml") + ": line 1: owners.payments: names no owner"},
		{write("two.yaml", "rules: rules.yaml\n---\n"), "opledger: config " + filepath.Join(dir, "two.yaml") + ": only one YAML document is allowed"},
		{write("misspelt.yaml", "destination: slow.yaml\n"), "opledger: config " + filepath.Join(dir, "misspelt.yaml") + ": yaml: line 1: unknown field destination (did you mean destinations?)"},
		// Said in plain words, never with Go's type names nor the file's
		// bytes decoded as garbled text.
		{write("notdb.txt", "only some notes\n"), "opledger: config " + filepath.Join(dir, "notdb.txt") + `: the file must be a YAML mapping of settings, one "name: value" per line (got a string)` + "\n"},
		{write("list.yaml", "- destinations: slow.yaml\n"), "opledger: config " + filepath.Join(dir, "list.yaml") + `: the file must be a YAML mapping of settings, one "name: value" per line (got a list)` + "\n"},
		{write("hooks.yaml", "webhooks: [stripe]\n"), "opledger: config " + filepath.Join(dir, "hooks.yaml") + `: line 1: webhooks: takes a mapping (one "name: value" per line), not a list` + "\n"},
		// UTF-16 with its byte-order mark is read as its text (here,
		// "he"); without one, it is refused as not UTF-8.
		{write("utf16.yaml", "\xff\xfeh\x00e\x00"), "opledger: config " + filepath.Join(dir, "utf16.yaml") + `: the file must be a YAML mapping of settings, one "name: value" per line (got a string)` + "\n"},
		{write("utf16-nobom.yaml", "h\x00e\x00"), "opledger: config " + filepath.Join(dir, "utf16-nobom.yaml") + ": the file is not UTF-8 text (UTF-16? it holds NUL bytes): save it as UTF-8\n"},
		{filepath.Join(dir, "big.yaml"), "opledger: read config: " + filepath.Join(dir, "big.yaml") + ": larger than 4 MiB"},
		{"/dev/zero", "opledger: read config: /dev/zero: not a regular file"},
		// An empty file, or one of comments only, is refused rather than
		// served as if no --config were given.
		{write("empty.yaml", ""), "opledger: config " + filepath.Join(dir, "empty.yaml") + " holds no settings (it is empty or only comments): write its settings, or leave --config out to serve without one\n"},
		{write("comments.yaml", "# destinations: destinations.yaml\n\n"), "opledger: config " + filepath.Join(dir, "comments.yaml") + " holds no settings (it is empty or only comments): write its settings, or leave --config out to serve without one\n"},
		{write("dests-big.yaml", "destinations: big.yaml\n"), "opledger: config destinations: read destinations: " + filepath.Join(dir, "big.yaml") + ": larger than 4 MiB"},
		{write("rules-zero.yaml", "rules: zero.yaml\n"), "opledger: config rules: read rules: " + filepath.Join(dir, "zero.yaml") + ": not a regular file"},
		// An unknown field of the destinations or rules file: the file,
		// the line and the field, each once (the file's kind used to be
		// said again: "config destinations: …: decode destinations: …",
		// "config rules: …: invalid input: rules: …").
		{write("typo-dests-config.yaml", "destinations: typo-dests.yaml\n"), "opledger: config destinations: " + filepath.Join(dir, "typo-dests.yaml") + ": yaml: line 5: unknown field timout (did you mean timeout?)\n"},
		{write("typo-rules-config.yaml", "rules: typo-rules.yaml\n"), "opledger: config rules: " + filepath.Join(dir, "typo-rules.yaml") + ": yaml: line 2: unknown field nme (did you mean name?)\n"},
		// A key with a space is said as written, not with Go's type
		// name after it.
		{write("spaced-key.yaml", "\"my key\": 1\n"), "opledger: config " + filepath.Join(dir, "spaced-key.yaml") + `: yaml: line 1: unknown field "my key"` + "\n"},
		{write("spaced-dests-config.yaml", "destinations: spaced-dests.yaml\n"), "opledger: config destinations: " + filepath.Join(dir, "spaced-dests.yaml") + `: yaml: line 5: unknown field "time out"` + "\n"},
		// A duration that is not one and an unknown field: both, by line
		// (the unknown field used to be left unsaid).
		{write("two-mistakes-config.yaml", "destinations: two-mistakes.yaml\n"), "opledger: config destinations: " + filepath.Join(dir, "two-mistakes.yaml") +
			`: line 5: destination crm: timeout: duration "10" needs a unit, e.g. 10s; line 6: unknown field bogus` + "\n"},
		{write("mistakes-reversed-config.yaml", "destinations: mistakes-reversed.yaml\n"), "opledger: config destinations: " + filepath.Join(dir, "mistakes-reversed.yaml") +
			`: line 4: unknown field bogus; line 6: destination crm: retry.max_delay: "1d" is not a duration like 10s or 24h` + "\n"},
		{write("empty-rules-config.yaml", "rules: empty-rules.yaml\n"), "opledger: config rules: " + filepath.Join(dir, "empty-rules.yaml") + ": the file is empty: it needs a rules list\n"},
		// Both files it names missing: one line names both.
		{write("both-missing.yaml", "destinations: no-dests.yaml\nrules: no-rules.yaml\n"), "opledger: config destinations: read destinations: stat " + filepath.Join(dir, "no-dests.yaml") +
			": no such file or directory; config rules: read rules: stat " + filepath.Join(dir, "no-rules.yaml") + ": no such file or directory\n"},
		{write("slow-config.yaml", "destinations: slow.yaml\n"), "opledger: config destinations: " + filepath.Join(dir, "slow.yaml") + ": line 5: executor: destination crm: its timeout 25s is not shorter than the executor's call limit 20s " +
			"(two thirds of the lease 30s), which would cut its calls short and leave them uncertain: raise the lease (serve --lease) to 38s or more"},
		// The approval policy is not announced by a server that then
		// refuses its configuration: the refusal is the only line.
		{write("approval-slow-config.yaml", "destinations: slow.yaml\nrequire_approval: [crm]\n"), "opledger: config destinations: " + filepath.Join(dir, "slow.yaml") + ": line 5: executor: destination crm: its timeout 25s is not shorter than the executor's call limit 20s "},
	} {
		for _, st := range testdb.Stores() {
			dsn := st.NewDSN(t)
			out, errOut, code := runGuarded(t, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", tc.config)
			require.Equal(t, 1, code, "%s %s: %s%s", st.Name, tc.config, out, errOut)
			require.Empty(t, out)
			require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			require.True(t, strings.HasPrefix(errOut, tc.msg), "%s: %s", tc.config, errOut)
			if st.Name == "sqlite" {
				_, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:"))
				require.ErrorIs(t, err, os.ErrNotExist, "%s: the SQLite file was created", tc.config)
			} else {
				u, err := url.Parse(dsn)
				require.NoError(t, err)
				require.Zero(t, pgTables(t, u.Query().Get("search_path")), "%s: tables were created", tc.config)
			}
		}
	}

	// A file named relative to a configuration file given relative to the
	// working directory: the error says where it was looked for.
	write("rel.yaml", "destinations: missing.yaml\n")
	out, errOut, code := runIn(t, dir, nil, "serve", "--addr", "127.0.0.1:0", "--db", testdb.SQLiteDSN(t), "--config", "rel.yaml")
	require.Equal(t, 1, code, out)
	require.Equal(t, "opledger: config destinations: read destinations: stat "+filepath.Join(dir, "missing.yaml")+": no such file or directory\n", errOut)

	// A lease whose two thirds exceed the destination's timeout: served.
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", testdb.SQLiteDSN(t), "--config", filepath.Join(dir, "slow-config.yaml"), "--lease", "38s")
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
	base := serveURL(t, cmd)
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestTokenCreateUnwritten: a token whose secret could not be written
// (stdout on a full disk) is revoked, and the command fails: the secret is
// shown only once, so nobody holds that token.
func TestTokenCreateUnwritten(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full on this system")
	}
	defer full.Close()
	requireUnwrittenTokenRevoked(t, full)
}

// requireUnwrittenTokenRevoked runs tokens create with its stdout on out,
// which takes no write, and requires that it fails (exit 1) and leaves
// its token revoked.
func requireUnwrittenTokenRevoked(t *testing.T, out *os.File) {
	t.Helper()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "l.db")
	cmd := exec.Command(binary, "tokens", "create", "--db", dsn, "--tenant", "acme", "--name", "lost")
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), "%v: %s", err, errOut.String())
	require.Contains(t, errOut.String(), "the token could not be written, so it was revoked")

	list, errText, code := run(t, "tokens", "list", "--db", dsn, "--json")
	require.Equal(t, 0, code, errText)
	var tok struct {
		Name      string  `json:"name"`
		RevokedAt *string `json:"revoked_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(list), &tok))
	require.Equal(t, "lost", tok.Name)
	require.NotNil(t, tok.RevokedAt, "revoked")
}

// TestTokenCreateClosedPipe: a token whose secret is written to a pipe
// nobody reads any more (the reader exited) is revoked, and the command
// fails, as docs/api.md says: SIGPIPE used to kill the process before it
// could revoke, leaving active a token nobody holds.
func TestTokenCreateClosedPipe(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close()) // the reader is gone before the write
	defer w.Close()
	requireUnwrittenTokenRevoked(t, w)
}

// TestTokensAccess: tokens create --read-only makes a token that a
// served API lets read and refuses to write (403, nothing recorded), and
// --worker one that may record but not decide (ops cancel with it exits 1
// with the 403, and the operation stays pending); tokens list shows each
// token's access, in its table and its JSON. Both flags at once are a
// usage error.
func TestTokensAccess(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme", "--name", "n8n")
	require.Equal(t, 0, code, errOut)
	writer := strings.TrimSpace(out)
	out, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "acme", "--name", "wall-screen", "--read-only")
	require.Equal(t, 0, code, errOut)
	reader := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(reader, opledger.TokenPrefix), "only the token on stdout: %q", out)
	out, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "acme", "--name", "zapier", "--worker")
	require.Equal(t, 0, code, errOut)
	worker := strings.TrimSpace(out)
	_, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "acme", "--name", "both", "--worker", "--read-only")
	require.Equal(t, 2, code)
	require.Equal(t, "opledger: --read-only and --worker are two different accesses: give one, or neither for a read-write token (see opledger tokens create --help)\n", errOut)

	out, errOut, code = run(t, "tokens", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^ID +TENANT +NAME +ACCESS +CREATED +LAST USED +REVOKED$`, out)
	require.Regexp(t, `(?m)^tok_[0-9a-f]+ +acme +n8n +read-write +\S+ +never +- *$`, out)
	require.Regexp(t, `(?m)^tok_[0-9a-f]+ +acme +wall-screen +read-only +\S+ +never +- *$`, out)
	require.Regexp(t, `(?m)^tok_[0-9a-f]+ +acme +zapier +worker +\S+ +never +- *$`, out)
	require.NotContains(t, out, "both", "nothing created by the refused command")
	out, errOut, code = run(t, "tokens", "list", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	access := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var tok struct {
			Name   string `json:"name"`
			Access string `json:"access"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &tok), line)
		access[tok.Name] = tok.Access
	}
	require.Equal(t, map[string]string{"n8n": "read-write", "wall-screen": "read-only", "zapier": "worker"}, access)

	base := serveURL(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn))
	ctx := context.Background()
	in := client.Intent{Action: "email.send", Destination: "email", Payload: []byte(`{"template":"welcome"}`)}
	_, _, err := client.New(base, reader, nil).Record(ctx, "mail:welcome:u1", in)
	require.ErrorIs(t, err, opledger.ErrForbidden)
	_, err = client.New(base, reader, nil).Get(ctx, "mail:welcome:u1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "read, and nothing recorded")
	_, _, err = client.New(base, writer, nil).Record(ctx, "mail:welcome:u1", in)
	require.NoError(t, err)
	op, err := client.New(base, reader, nil).Get(ctx, "mail:welcome:u1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	_, _, err = client.New(base, worker, nil).Record(ctx, "mail:welcome:u2", in)
	require.NoError(t, err, "a worker token records")
	_, errOut, code = run(t, "ops", "cancel", "mail:welcome:u2", "--reason", "sent by hand", "--server", base, "--token", worker)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "opledger: forbidden (HTTP 403): the token tok_")
	require.Contains(t, errOut, "is a worker token: it may not take an operator's decision (resolve, approve)")
	op, err = client.New(base, writer, nil).Get(ctx, "mail:welcome:u2")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State, "not cancelled")

	// An empty list through the server: the tenant is the token's, and
	// --tenant is refused there, so the note does not point to it.
	for _, what := range []string{"event", "workflow"} {
		_, errOut, code = run(t, what+"s", "list", "--server", base, "--token", reader)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "note: the token's tenant lists no "+what+" at all: a token of another tenant lists that tenant's\n", errOut)
	}

	// Both have been used now: the list says when, once serve's writes
	// of the uses, made beside the requests, are in (a guard, not a
	// wait: it reads the ledger until they are).
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, errOut, code = run(t, "tokens", "list", "--db", dsn)
		require.Equal(t, 0, code, errOut)
		if !strings.Contains(out, "never") {
			break
		}
		require.True(t, time.Now().Before(deadline), "a use not written:\n%s", out)
	}
	require.Regexp(t, `(?m)^tok_[0-9a-f]+ +acme +wall-screen +read-only +\S+ +\d{4}-\d\d-\d\dT\S+ +- *$`, out)
}

// TestServeDestinationPolicy: with require_approval in --config, an
// operation for such a destination that a worker token records without
// asking for approval waits for one, which the worker token may not give
// and a read-write token may; with owners, it names the destination's
// owner; other destinations are not touched. serve says at start which
// destinations require approval.
func TestServeDestinationPolicy(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	token := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append([]string{"tokens", "create", "--db", dsn, "--tenant", "acme"}, args...)...)
		require.Equal(t, 0, code, errOut)
		return strings.TrimSpace(out)
	}
	operator, worker := token("--name", "ops-laptop"), token("--name", "n8n", "--worker")
	config := filepath.Join(t.TempDir(), "opledger.yaml")
	require.NoError(t, os.WriteFile(config, []byte("require_approval: [payments, refunds]\nowners: {payments: finance}\n"), 0o644))
	logs := &testrig.LogBuffer{}
	base := startedURL(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", config), logs)
	require.Contains(t, logs.String(), `msg="every operation for these destinations waits for approval" destinations="[payments refunds]"`)

	ctx := context.Background()
	automation := client.New(base, worker, nil)
	op, created, err := automation.Record(ctx, "order:1:charge", client.Intent{Action: "payments.capture", Destination: "payments", Payload: []byte(`{"cents":1200}`)})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, opledger.StateAwaitingApproval, op.State, "the worker did not ask; the server's policy did")
	require.True(t, op.RequiresApproval)
	require.Equal(t, "finance", op.Owner, "the destination's owner, since the intent names none")
	_, err = automation.Claim(ctx, op.Key, client.ClaimRequest{})
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	approval := opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "ana"}
	_, _, err = automation.Approve(ctx, op.Key, approval)
	require.ErrorIs(t, err, opledger.ErrForbidden, "the automation cannot approve its own operation")
	op, _, err = client.New(base, operator, nil).Approve(ctx, op.Key, approval)
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	_, err = automation.Claim(ctx, op.Key, client.ClaimRequest{})
	require.NoError(t, err, "approved, the automation claims it")

	op, _, err = automation.Record(ctx, "order:1:mail", client.Intent{Action: "mail.send", Destination: "mail", Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State, "other destinations are not touched")
	require.Empty(t, op.Owner)
}

// TestServeSettingsDiffer: two serve processes on one store, one with a
// configuration file that requires approval, the other without: the one
// started second logs a warning naming the settings that differ, both
// count two processes, one with other settings, on /metrics, and once
// the second stops (SIGTERM) the first counts itself alone.
func TestServeSettingsDiffer(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	config := filepath.Join(t.TempDir(), "opledger.yaml")
	require.NoError(t, os.WriteFile(config, []byte("require_approval: [payments]\n"), 0o644))
	serve := func(logs io.Writer, args ...string) (string, *exec.Cmd) {
		cmd := exec.Command(binary, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn, "--metrics-max-age", "0"}, args...)...)
		return startedURL(t, cmd, logs), cmd
	}
	gauges := func(base string) (processes, differing string) {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(line, "opledger_processes "); ok {
				processes = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "opledger_processes_with_other_settings "); ok {
				differing = strings.TrimSpace(v)
			}
		}
		return processes, differing
	}

	first, _ := serve(io.Discard, "--config", config)
	// Maintain announces it as it starts, beside the listener.
	require.Eventually(t, func() bool { p, _ := gauges(first); return p == "1" }, time.Minute, 20*time.Millisecond)
	logs := &testrig.LogBuffer{}
	second, cmd := serve(logs)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "runs with other settings") }, time.Minute, 20*time.Millisecond)
	require.Regexp(t, `level=WARN msg="another process that maintains this ledger runs with other settings: every process sharing a store must have the same" settings=\[require_approval\] process_host=\S+ process_pid=\d+ `, logs.String())
	require.NotContains(t, logs.String(), "payments", "names of settings, never their values")
	for _, base := range []string{first, second} {
		p, d := gauges(base)
		require.Equal(t, [2]string{"2", "1"}, [2]string{p, d}, base)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	p, d := gauges(first)
	require.Equal(t, [2]string{"1", "0"}, [2]string{p, d}, "the second removed its announcement as it stopped")

	// Two proxies of different upstreams beside the server, as
	// docs/proxy.md describes: each records operations for its own
	// upstream only, so none of the three differs from another.
	var proxies []*exec.Cmd
	var proxyLogs []*testrig.LogBuffer
	for _, name := range []string{"crm", "mail"} {
		logs := &testrig.LogBuffer{}
		cmd := exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--name", name, "--db", dsn)
		startedURL(t, cmd, logs)
		proxies, proxyLogs = append(proxies, cmd), append(proxyLogs, logs)
	}
	require.Eventually(t, func() bool { p, _ := gauges(first); return p == "3" }, time.Minute, 20*time.Millisecond)
	_, d = gauges(first)
	require.Equal(t, "0", d, "the server does not count the proxies as different")
	for i, cmd := range proxies {
		// Stopped, so that a warning its first announcement would have
		// logged is in its log.
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait())
		require.NotContains(t, proxyLogs[i].String(), "runs with other settings")
	}
}

// TestServeLogsMigrations: serve (and proxy) log the creation of a new
// ledger's schema in one line (and each migration of an upgrade, so that
// an upgrade of a large ledger, during which the process answers nothing,
// shows where it is: TestLogMigrations); a ledger up to date logs none.
func TestServeLogsMigrations(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	logs := &testrig.LogBuffer{}
	startedURL(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn), logs)
	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	require.Contains(t, logs.String(), fmt.Sprintf(`msg="created the ledger's schema" migrations=%d`, len(versions)))
	require.NotContains(t, logs.String(), "migrating", "nothing upgraded")

	again := &testrig.LogBuffer{}
	startedURL(t, exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--db", dsn), again)
	require.NotContains(t, again.String(), "migrating", "up to date")
}

// TestServeRefusesTenantsADestinationDoesNotServe: with a destination
// that lists its tenants in the config's destinations file, serve's API
// refuses another tenant's new operation for it (422
// destination_not_served), nothing recorded, and takes a listed tenant's.
func TestServeRefusesTenantsADestinationDoesNotServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dests := "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    ref: /id\n    timeout: 5s\n    tenants: [acme]\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dests.yaml"), []byte(dests), 0o644))
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte("destinations: dests.yaml\n"), 0o644))
	dsn := "sqlite:" + filepath.Join(dir, "ledger.db")
	tokens := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", tenant)
		require.Equal(t, 0, code, errOut)
		tokens[tenant] = strings.TrimSpace(out)
	}
	base := serveURL(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", config))
	ctx := context.Background()
	in := client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}

	globex := client.New(base, tokens["globex"], nil)
	_, _, err := globex.Record(ctx, "order:1:create", in)
	require.ErrorIs(t, err, opledger.ErrDestinationNotServed)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, http.StatusUnprocessableEntity, ce.Status)
	require.Equal(t, httpapi.ProblemTypeBase+"destination_not_served", ce.Problem.Type)
	require.Contains(t, ce.Problem.Detail, `destination "crm" does not serve tenant "globex"`)
	_, err = globex.Get(ctx, "order:1:create")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")

	_, created, err := client.New(base, tokens["acme"], nil).Record(ctx, "order:1:create", in)
	require.NoError(t, err)
	require.True(t, created)
}
