package cli_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/cli"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

type proxied struct {
	status int
	header http.Header
	body   string
}

// postThrough posts body to url with an Idempotency-Key and a bearer token.
func postThrough(t *testing.T, url, key, body string) proxied {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer cli_SECRET_token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return proxied{resp.StatusCode, resp.Header, string(data)}
}

// TestProxyCommand runs 'opledger proxy --upstream' as a process: first
// call, replay, mismatch, a lost response, and SIGTERM while a request is
// in flight (it finishes, the process exits 0, the ledger has it).
func TestProxyCommand(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			up := fakedest.New(t, fakedest.Options{})
			dsn := st.NewDSN(t)
			logs := &testrig.LogBuffer{}
			cmd := exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.URL(), "--db", dsn)
			base := startedURL(t, cmd, logs)

			first := postThrough(t, base+"/records", "order-17", `{"external_ref":"o17","amount":1}`)
			require.Equal(t, http.StatusCreated, first.status, first.body)
			again := postThrough(t, base+"/records", "order-17", `{"external_ref":"o17","amount":1}`)
			require.Equal(t, http.StatusCreated, again.status)
			require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
			require.Equal(t, first.body, again.body)
			other := postThrough(t, base+"/records", "order-17", `{"external_ref":"o17","amount":2}`)
			require.Equal(t, http.StatusUnprocessableEntity, other.status)
			require.Contains(t, other.body, "fingerprint_mismatch")

			up.Fail(fakedest.LoseResponse)
			lost := postThrough(t, base+"/records", "order-18", `{"external_ref":"o18"}`)
			require.Equal(t, http.StatusBadGateway, lost.status)
			require.Contains(t, lost.body, `"state":"uncertain"`)
			require.Equal(t, 2, up.Creates())

			// SIGTERM while a request is in flight.
			arrived := up.Arrivals()
			up.Fail(fakedest.Block)
			done := make(chan proxied, 1)
			go func() { done <- postThrough(t, base+"/records", "order-19", `{"external_ref":"o19"}`) }()
			<-arrived
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			up.Release()
			require.Equal(t, http.StatusCreated, (<-done).status, "the in-flight request finishes")
			require.NoError(t, cmd.Wait(), "proxy exits 0 after SIGTERM")

			out, errOut, code := run(t, "ops", "list", "--db", dsn, "--json")
			require.Equal(t, 0, code, errOut)
			require.Equal(t, 3, strings.Count(out, `"destination":"proxy:upstream"`), out)
			require.Equal(t, 2, strings.Count(out, `"state":"succeeded"`), out)
			require.Equal(t, 1, strings.Count(out, `"state":"uncertain"`), out)
			for _, secret := range []string{"cli_SECRET", "order-1", "o17"} {
				require.NotContains(t, out, secret)
				require.NotContains(t, logs.String(), secret)
			}
			require.Contains(t, logs.String(), "msg=forwarded")
		})
	}
}

// TestProxyAdmin: 'opledger proxy --admin-listen' answers probes and
// scrapes on an address of its own: /healthz, /readyz and the ledger's
// /metrics, with the upstream's attempt series, and nothing else; on the
// proxy's address the same paths are the upstream's.
func TestProxyAdmin(t *testing.T) {
	t.Parallel()
	up := fakedest.New(t, fakedest.Options{})
	logs := &testrig.LogBuffer{}
	cmd := exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", up.URL(),
		"--db", "sqlite:"+filepath.Join(t.TempDir(), "proxy.db"))
	base := startedURL(t, cmd, logs)
	m := regexp.MustCompile(`msg="probes and metrics" url=(http://\S+)`).FindStringSubmatch(logs.String())
	require.NotNil(t, m, logs.String())
	admin := m[1]
	require.NotEqual(t, base, admin)
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(data)
	}
	first := postThrough(t, base+"/records", "order-1", `{"external_ref":"o1"}`)
	require.Equal(t, http.StatusCreated, first.status, first.body)

	for _, path := range []string{"/healthz", "/readyz"} {
		status, body := get(admin + path)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
	}
	status, body := get(admin + "/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `opledger_attempts_total{destination="proxy:upstream",outcome="succeeded"} 1`)
	require.Contains(t, body, `opledger_operations{state="succeeded"} 1`)
	status, body = get(admin + "/v1/operations")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, "serves GET /healthz, /readyz, /metrics only")
	status, _ = get(base + "/metrics")
	require.Equal(t, http.StatusNotFound, status, "on the proxy's address, the upstream's path")

	_, errOut, code := runGuarded(t, "proxy", "--admin-listen", "nowhere", "--upstream", up.URL(), "--db", "sqlite:"+filepath.Join(t.TempDir(), "p.db"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--admin-listen takes HOST:PORT")
}

// TestProxyConfig: a config file with an upstream under a prefix that
// declares a lookup; the reconciler inside the proxy settles a lost
// response and a repeat gets 200 with the ref. Broken invocations are
// usage errors.
func TestProxyConfig(t *testing.T) {
	t.Parallel()
	up := fakedest.New(t, fakedest.Options{})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "proxy.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
upstreams:
  - name: crm
    prefix: /crm/
    url: `+up.URL()+`
    lookup:
      url: "`+up.URL()+`/records?external_ref={{urlquery .Payload.body.external_ref}}"
      results: /items
      authoritative: true
      match:
        - record: /external_ref
          payload: /body/external_ref
`), 0o644))
	dsn := testdb.SQLiteDSN(t)
	cmd := exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--config", cfg, "--db", dsn, "--reconcile-interval", "100ms")
	base := startedURL(t, cmd, io.Discard)

	up.Fail(fakedest.LoseResponse)
	lost := postThrough(t, base+"/crm/records", "k1", `{"external_ref":"x1"}`)
	require.Equal(t, http.StatusBadGateway, lost.status, lost.body)
	var got proxied
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for ; ; <-poll.C {
		got = postThrough(t, base+"/crm/records", "k1", `{"external_ref":"x1"}`)
		if got.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
		require.Contains(t, got.body, `"state":"uncertain"`)
		retry := got.header.Get("Retry-After")
		require.NotEmpty(t, retry)
	}
	require.Equal(t, http.StatusOK, got.status, got.body)
	var res struct {
		State          string `json:"state"`
		DestinationRef string `json:"destination_ref"`
	}
	require.NoError(t, json.Unmarshal([]byte(got.body), &res))
	require.Equal(t, "succeeded", res.State)
	require.Equal(t, "R1", res.DestinationRef)
	require.Equal(t, 1, up.Creates())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())

	_, errOut, code := run(t, "proxy", "--db", dsn)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--upstream URL or --config FILE is required")
	_, errOut, code = run(t, "proxy", "--db", dsn, "--upstream", up.URL(), "--config", cfg)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not both")
	require.NoError(t, os.WriteFile(cfg, []byte("upstreams:\n  - name: crm\n    url: "+up.URL()+"\n    prefx: /x\n"), 0o644))
	_, errOut, code = run(t, "proxy", "--db", dsn, "--config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "yaml: line 4: unknown field prefx (did you mean prefix?)\n")
	out, _, code := run(t, "proxy", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "opledger proxy --upstream https://crm.example.com/api")
	require.Contains(t, out, "Idempotent-Replayed")
}

// TestProxyConfigRefusedBeforeOpening: a proxy configuration file that is
// refused names itself, and is refused before the ledger is opened
// (nothing created): a tenant outside the key syntax (used to be reported
// by the ledger without the file), a second YAML document (used to be
// ignored), a file that is not regular or larger than 4 MiB (/dev/zero
// used to be read without end), and two upstreams with the same name,
// which the error names as such.
func TestProxyConfigRefusedBeforeOpening(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		return path
	}
	const upstreams = "upstreams:\n  - name: crm\n    prefix: /crm/\n    url: http://127.0.0.1:1\n"
	big := write("big.yaml", upstreams+"# "+strings.Repeat("x", 4<<20)+"\n")
	for _, tc := range []struct{ config, msg string }{
		{write("tenant.yaml", "tenant: \"bad tenant\"\n"+upstreams),
			"opledger: proxy config " + filepath.Join(dir, "tenant.yaml") + ": tenant takes a name in the operation key syntax: key may contain only letters"},
		{write("two.yaml", upstreams+"---\n"+upstreams), "opledger: proxy config " + filepath.Join(dir, "two.yaml") + ": only one YAML document is allowed"},
		{big, "opledger: read proxy config: " + big + ": larger than 4 MiB"},
		{write("notes.txt", "only some notes\n"), "opledger: proxy config " + filepath.Join(dir, "notes.txt") + `: the file must be a YAML mapping of settings, one "name: value" per line (got a string)` + "\n"},
		{write("crm.yaml", "upstreams: crm\n"), "opledger: proxy config " + filepath.Join(dir, "crm.yaml") + `: line 1: upstreams: takes a list (one "- item" per line, or [a, b]), not a string ("crm")` + "\n"},
		// UTF-16 with its byte-order mark is read as its text (here, "up").
		{write("utf16.yaml", "\xff\xfeu\x00p\x00"), "opledger: proxy config " + filepath.Join(dir, "utf16.yaml") + `: the file must be a YAML mapping of settings, one "name: value" per line (got a string)` + "\n"},
		{write("utf16-odd.yaml", "\xff\xfeu\x00p"), "opledger: proxy config " + filepath.Join(dir, "utf16-odd.yaml") + ": the file is not UTF-8 text: it starts with a UTF-16 byte-order mark, but its length is odd: save it as UTF-8\n"},
		{"/dev/zero", "opledger: read proxy config: /dev/zero: not a regular file"},
		{write("names.yaml", upstreams+"  - name: crm\n    prefix: /other/\n    url: http://127.0.0.1:2\n"),
			"opledger: proxy config " + filepath.Join(dir, "names.yaml") + ": line 5: upstream crm: the name is already used by another upstream: each needs its own"},
		{write("prefixes.yaml", upstreams+"  - name: mail\n    prefix: /crm/\n    url: http://127.0.0.1:2\n"),
			"opledger: proxy config " + filepath.Join(dir, "prefixes.yaml") + ": line 5: upstream mail: prefix /crm/ is already used by upstream crm"},
	} {
		path := filepath.Join(t.TempDir(), "ledger.db")
		out, errOut, code := runGuarded(t, "proxy", "--listen", "127.0.0.1:0", "--db", "sqlite:"+path, "--config", tc.config)
		require.Equal(t, 1, code, "%s: %s%s", tc.config, out, errOut)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		require.True(t, strings.HasPrefix(errOut, tc.msg), "%s: %s", tc.config, errOut)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "%s: the ledger was created", tc.config)
	}
}

// TestAcceptScopeChangeCheckedBeforeOpening: --accept-scope-change naming
// no configured upstream (a typo) is a usage error, said before the
// ledger is opened: it was refused only once the ledger had been
// created and migrated, with exit 1.
func TestAcceptScopeChangeCheckedBeforeOpening(t *testing.T) {
	t.Parallel()
	config := filepath.Join(t.TempDir(), "proxy.yaml")
	require.NoError(t, os.WriteFile(config, []byte("upstreams:\n  - name: crm\n    url: http://127.0.0.1:1\n"), 0o644))
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1", "--accept-scope-change", "crm"},
			`opledger: --accept-scope-change names upstream "crm", which is not configured (upstreams: upstream)`},
		{[]string{"--config", config, "--accept-scope-change", "crm,cmr"},
			`opledger: --accept-scope-change names upstream "cmr", which is not configured (upstreams: crm)`},
	} {
		path := filepath.Join(t.TempDir(), "ledger.db")
		out, errOut, code := runGuarded(t, append([]string{"proxy", "--listen", "127.0.0.1:0", "--db", "sqlite:" + path}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		require.True(t, strings.HasPrefix(errOut, tc.msg), "%v: %s", tc.args, errOut)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "%v: the ledger was created", tc.args)
	}
}

// TestSecondInterrupt: a second Ctrl-C while the proxy waits for a
// request in flight (its shutdown timeout ten minutes away) ends the
// process at once, exit 130, saying what it leaves; a second SIGTERM
// does not cut the stop short: the request finishes and the process
// exits 0.
func TestSecondInterrupt(t *testing.T) {
	t.Parallel()
	up := fakedest.New(t, fakedest.Options{})
	dsn := testdb.SQLiteDSN(t)
	start := func() (*exec.Cmd, *testrig.LogBuffer, string) {
		logs := &testrig.LogBuffer{}
		cmd := exec.Command(binary, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.URL(), "--db", dsn, "--shutdown-timeout", "10m")
		return cmd, logs, startedURL(t, cmd, logs)
	}
	// stopping sends sig and returns once the proxy says it is stopping.
	stopping := func(cmd *exec.Cmd, logs *testrig.LogBuffer, sig os.Signal) {
		t.Helper()
		require.NoError(t, cmd.Process.Signal(sig))
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), "shutting down"); <-poll.C {
			require.False(t, time.Now().After(deadline), "the proxy never said it was stopping: %s", logs)
		}
	}
	// exited waits for cmd, at most a minute (far less than the shutdown
	// timeout), and returns its exit code.
	exited := func(cmd *exec.Cmd) int {
		t.Helper()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			require.NoError(t, err)
			return 0
		case <-time.After(time.Minute):
			t.Fatal("the proxy did not stop")
			return -1
		}
	}

	cmd, logs, base := start()
	arrived := up.Arrivals()
	up.Fail(fakedest.Block)
	go func() {
		// Cut off by the process's end: no answer to check.
		req, _ := http.NewRequest(http.MethodPost, base+"/records", strings.NewReader(`{"external_ref":"o1"}`))
		req.Header.Set("Idempotency-Key", "order-1")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived
	stopping(cmd, logs, os.Interrupt)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	// Read before Wait, which closes the pipe: the line written just
	// before the exit could otherwise be lost with it.
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), "opledger: interrupted again: stopping at once"); <-poll.C {
		require.False(t, time.Now().After(deadline), "the proxy never said it stops at once: %s", logs)
	}
	require.Equal(t, cli.ExitInterrupted, exited(cmd), "%s", logs)
	up.Release()

	cmd, logs, base = start()
	arrived = up.Arrivals()
	up.Fail(fakedest.Block)
	done := make(chan proxied, 1)
	go func() { done <- postThrough(t, base+"/records", "order-2", `{"external_ref":"o2"}`) }()
	<-arrived
	stopping(cmd, logs, syscall.SIGTERM)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	up.Release()
	require.Equal(t, http.StatusCreated, (<-done).status, "the request in flight finishes")
	require.Equal(t, 0, exited(cmd), "%s", logs)
	require.NotContains(t, logs.String(), "interrupted again")
}
