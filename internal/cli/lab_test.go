package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// caseFile reads lab/cases.csv and returns its header and rows.
func caseFile(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../lab/cases.csv")
	require.NoError(t, err)
	return strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}

func writeFile(t *testing.T, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cases.csv")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

func TestLabRun(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	path, err := filepath.Abs("../../lab/cases.csv")
	require.NoError(t, err)
	out, errOut, code := run(t, "lab", "run", path)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `lost-response\s+interactive\s+3/3\s+1/1\s+1/1\s+0/0\s+0/0\s+succeeded\s+ok`, out)
	require.Equal(t, len(lines)-1, strings.Count(out, " ok\n"), "one line per case:\n%s", out)
	require.Empty(t, errOut, "no progress bar when stderr is not a terminal")
}

// TestLabRunCaseExplain: --case runs only the cases named, in the file's
// order; --explain adds each case's title, explanation and steps below
// the table, and a case that differs says so there; an id the file lacks
// is a usage error naming the file's cases.
func TestLabRunCaseExplain(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	lines[1] = strings.Replace(lines[1], "send; retry,2,1,", "send; retry,2,2,", 1) // normal: expect 2 actions
	path := writeFile(t, lines)
	out, errOut, code := run(t, "lab", "run", path, "--case", "changed-data,normal", "--explain")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, 2, strings.Count(out, "interactive"), "two cases:\n%s", out)
	require.Less(t, strings.Index(out, "\nnormal "), strings.Index(out, "\nchanged-data "), "in the file's order")
	require.Contains(t, out, "\nnormal (line 2): Send, then repeat\n  The repeat is answered from the ledger with the saved result; the CRM acts once.\n"+
		"  DIFFERS: actions: want 2, got 1\n  send → succeeded: ")
	require.Contains(t, out, "\nchanged-data (line 3): A retry with changed data\n  Same key with 3 units")
	require.NotContains(t, out, "lost-response")

	out, errOut, code = run(t, "lab", "run", path, "--case", "changed-data")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "A retry with changed data", "without --explain a case that passes shows its line only")

	// The steps' words follow what happened: a retry is a second attempt,
	// not "recorded and sent once"; the worker's run names each state.
	out, errOut, code = run(t, "lab", "run", path, "--case", "duplicate-event,timeout-before-commit", "--explain")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "opledger sent it again (attempt 2; no earlier attempt had acted); the lab-crm acted once and confirmed lab-crm-1.")
	require.Contains(t, out, "The worker carried out DEMO-OP-017, now succeeded.")

	_, errOut, code = run(t, "lab", "run", path, "--case", "")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--case is empty")

	_, errOut, code = run(t, "lab", "run", path, "--case", "normal,nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `--case: the file has no case "nope" (cases: normal, changed-data, `)

	// lab run takes a PostgreSQL server only: every other store is
	// refused with that, not with the SQLite advice of other commands.
	for _, dsn := range []string{"mysql://u@h/db", "sqlite:" + filepath.Join(t.TempDir(), "x.db")} {
		_, errOut, code = run(t, "lab", "run", path, "--db", dsn)
		require.Equal(t, 2, code)
		require.Contains(t, errOut, "--db takes a postgres:// URL (each case gets a fresh schema there)")
		require.NotContains(t, errOut, "sqlite:PATH")
	}
}

// TestLabCrashNothingDueCountsAlike: a crash step whose worker finds
// nothing due is no attempt, whether it runs in a worker process or in
// the runner's own (it counted one in a process only, so one case file
// could pass one way and fail the other).
func TestLabCrashNothingDueCountsAlike(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	row := "wf-nothing-due,production,crm,none,workflow 1; run; crash after_claim,1,1,0,0,0,succeeded,t,t,e,e"
	path := writeFile(t, []string{lines[0], row})
	for _, mode := range [][]string{{"lab", "run", path}, {"lab", "run", "--crash-in-process", path}} {
		out, errOut, code := run(t, mode...)
		require.Equal(t, 0, code, "%v: %s%s", mode, out, errOut)
		require.Contains(t, out, " ok\n", "%v", mode)
	}
}

// TestLabCrashRetryPolicyAlike: a worker process judges its report by the
// lab's three-attempt retry policy, as the runner does in process: the
// third 429, reported by a worker that then dies, exhausts the operation
// either way (the worker process used the default policy of five attempts,
// leaving it pending).
func TestLabCrashRetryPolicyAlike(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	var row string
	for _, l := range lines {
		if strings.HasPrefix(l, "crash-after-report-exhausted,") {
			row = l
		}
	}
	require.Contains(t, row, ",send; advance 1m; retry; advance 1m; crash after_report,3,0,0,0,0,failed/exhausted,")
	path := writeFile(t, []string{lines[0], row})
	for _, mode := range [][]string{{"lab", "run", "--json", path}, {"lab", "run", "--json", "--crash-in-process", path}} {
		out, errOut, code := run(t, mode...)
		require.Equal(t, 0, code, "%v: %s%s", mode, out, errOut)
		var r struct {
			Pass bool `json:"pass"`
			Got  struct {
				State string `json:"state"`
			} `json:"got"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		require.True(t, r.Pass, "%v: %s", mode, out)
		require.Equal(t, "failed/exhausted", r.Got.State, "%v", mode)
	}
}

// TestLabCrashBeforeClaimStateNone: a case whose operation is never
// recorded expects the state none, and gets it in a worker process as in
// the runner's.
func TestLabCrashBeforeClaimStateNone(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	row := "never,production,crm,none,crash before_claim,0,0,0,0,0,none,t,t,e,e"
	path := writeFile(t, []string{lines[0], row})
	for _, mode := range [][]string{{"lab", "run", path}, {"lab", "run", "--crash-in-process", path}} {
		out, errOut, code := run(t, mode...)
		require.Equal(t, 0, code, "%v: %s%s", mode, out, errOut)
		require.Regexp(t, `never\s+production\s+0/0\s+0/0\s+0/0\s+0/0\s+0/0\s+none\s+ok`, out, "%v", mode)
	}
	// Any other word is still refused, naming none among the states.
	_, errOut, code := run(t, "lab", "run", writeFile(t, []string{lines[0], strings.Replace(row, ",none,t,", ",nothing,t,", 1)}))
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `line 2: state: "nothing" is not a state (`)
	require.Contains(t, errOut, ", none)")
}

// TestLabRunCrashProcess: a crash step runs in a worker process that is
// killed at its crash point, and the case still passes.
func TestLabRunCrashProcess(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	var row string
	for _, l := range lines {
		if strings.HasPrefix(l, "restart-before-recording-success,") {
			row = l
		}
	}
	require.NotEmpty(t, row)
	out, errOut, code := run(t, "lab", "run", "--json", writeFile(t, []string{lines[0], row}))
	require.Equal(t, 0, code, errOut)
	var r struct {
		Pass  bool `json:"pass"`
		Steps []struct {
			Step, State, Explanation string
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.True(t, r.Pass)
	require.Equal(t, "crash after_effect", r.Steps[0].Step)
	require.Regexp(t, `worker process \d+ killed with SIGKILL at after_effect`, r.Steps[0].Explanation)
	require.Equal(t, "in_progress", r.Steps[0].State, "the killed worker never reported")
	require.Equal(t, "uncertain", r.Steps[2].State, "its dispatched lease expired into uncertain")
}

func TestLabRunWrongExpectation(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	require.True(t, strings.HasPrefix(lines[1], "normal,interactive,crm,none,send; retry,2,1,"), lines[1])
	// The normal case makes one action; expect two.
	lines[1] = strings.Replace(lines[1], "send; retry,2,1,", "send; retry,2,2,", 1)
	out, errOut, code := run(t, "lab", "run", writeFile(t, lines[:3]))
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `normal\s+interactive\s+2/2\s+2/1 ✗.*DIFFERS`, out)
	require.Regexp(t, `changed-data\s.*\sok`, out)
	require.Contains(t, out, "normal (line 2): actions: want 2, got 1")
	require.Regexp(t, `^opledger: 1 of 2 cases differ from what \S+cases.csv expects: normal\n$`, errOut)

	// JSON says the same.
	out, _, code = run(t, "lab", "run", "--json", writeFile(t, lines[:2]))
	require.Equal(t, 1, code)
	var r struct {
		Pass bool `json:"pass"`
		Got  struct {
			Actions int `json:"actions"`
		} `json:"got"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.False(t, r.Pass)
	require.Equal(t, 1, r.Got.Actions)
}

func TestLabRunMalformed(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	for name, tc := range map[string]struct {
		lines []string
		says  string
	}{
		"unknown step":   {[]string{lines[0], lines[1], strings.Replace(lines[2], "send; retry units=3", "send; jump", 1)}, "line 3: steps: step 2 \"jump\": unknown step"},
		"bad count":      {[]string{lines[0], strings.Replace(lines[1], "send; retry,2,", "send; retry,two,", 1)}, "line 2: attempts: \"two\" is not a count"},
		"missing column": {[]string{lines[0], "normal,interactive,crm"}, "line 2: 3 fields, want 15"},
		"bad header":     {[]string{"id,kind", lines[1]}, "line 1: the header must be exactly id,kind,destination"},
		"unknown fault":  {[]string{lines[0], strings.Replace(lines[1], "crm,none,", "crm,meteor,", 1)}, "line 2: faults: unknown fault \"meteor\""},
		"long advance":   {[]string{lines[0], strings.Replace(lines[1], "send; retry,", "send; advance 99999999h; retry,", 1)}, "advance 99999999h is too long: at most about 2562047h"},
		"not UTF-8":      {[]string{lines[0], strings.Replace(lines[1], "Send", "Send \xff", 1)}, "line 2: not UTF-8: the case file is UTF-8 text"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, errOut, code := run(t, "lab", "run", writeFile(t, tc.lines))
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, tc.says)
		})
	}
	_, errOut, code := run(t, "lab", "run", "no-such-file.csv")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "no-such-file.csv")
}

func TestLabScenario(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "lab.db")
	out, errOut, code := run(t, "lab", "scenario", "lost-response", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	// The first counter is the automation's requests to opledger, not the
	// ledger's attempts (calls to the CRM: one here, shown by ops show):
	// "attempts 2" beside "opledger sent nothing" read as a second call.
	require.Regexp(t, `(?s)1\. Send 2 units\n\s+requests 1 · actions 1 · verifications 0 · state uncertain`, out)
	require.Regexp(t, `(?s)2\. Retry\n\s+requests 2 · actions 1 · verifications 0 · state uncertain\n\s+Held back`, out)
	require.Regexp(t, `(?s)3\. Verify at the CRM\n\s+requests 2 · actions 1 · verifications 1 · state succeeded`, out)
	require.Regexp(t, `(?s)4\. Retry\n\s+requests 3 · actions 1 · verifications 1 · state succeeded`, out)
	require.NotContains(t, out, "attempts")

	out, errOut, code = run(t, "lab", "scenario", "changed-data", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	steps := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, steps, 2)
	var last struct {
		Counters struct{ Attempts, Actions int }
		State    string
	}
	require.NoError(t, json.Unmarshal([]byte(steps[1]), &last))
	require.Equal(t, 2, last.Counters.Attempts)
	require.Equal(t, 1, last.Counters.Actions)

	_, errOut, code = run(t, "lab", "scenario", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unknown scenario \"nope\"")
}

// TestLabScenarioScratch: without --db a scenario runs on a scratch
// ledger, removed afterwards: neither ./opledger.db nor $OPLEDGER_DB (a
// served store, whose metrics would count the lab's operations) is touched.
func TestLabScenarioScratch(t *testing.T) {
	t.Parallel()
	work, tmp := t.TempDir(), t.TempDir()
	cmd := exec.Command(binary, "lab", "scenario", "lost-response")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=sqlite:"+filepath.Join(work, "served.db"), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "3. Verify at the CRM")
	for _, dir := range []string{work, tmp} {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "nothing left in %s", dir)
	}
}

func TestLabSim(t *testing.T) {
	t.Parallel()
	digest := func() string {
		out, errOut, code := run(t, "lab", "sim", "--seed", "3", "--ops", "8", "--json")
		require.Equal(t, 0, code, errOut)
		var rep struct {
			Seed       int64  `json:"seed"`
			Operations int    `json:"operations"`
			Digest     string `json:"digest"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		require.Equal(t, int64(3), rep.Seed)
		require.Equal(t, 8, rep.Operations)
		require.Len(t, rep.Digest, 64)
		return rep.Digest
	}
	require.Equal(t, digest(), digest(), "one seed, one run")

	out, errOut, code := run(t, "lab", "sim", "--seeds", "2", "--ops", "5")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^seed 1: `, out)
	require.Regexp(t, `(?m)^seed 2: `, out)
	require.Contains(t, out, "2 seeds: 0 broke an invariant")

	// A count below 1 is refused naming the flag that is wrong.
	for _, tc := range []struct{ args, says string }{
		{"--seeds 0", "--seeds must be at least 1, got 0"},
		{"--seeds 3 --workers 0", "--workers must be at least 1, got 0"},
		{"--seed 3 --ops -2", "--ops must be at least 1, got -2"},
	} {
		_, errOut, code := run(t, append([]string{"lab", "sim"}, strings.Fields(tc.args)...)...)
		require.Equal(t, 2, code, tc.args)
		require.Equal(t, "opledger: "+tc.says, usageLine(t, errOut), tc.args)
	}
	_, errOut, code = run(t, "lab", "sim", "--seed", "3", "--seeds", "0")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "give one of them", "--seeds does not apply with --seed: said so, not checked")

	// Counts past their bounds are usage errors, said in one line, before
	// anything is allocated for them (--seeds 2000000000 built a list of
	// 16 GB and died out of memory).
	for _, tc := range []struct{ args, says string }{
		{"--seeds 2000000000", "--seeds takes at most 1000000 (got 2000000000)"},
		{"--seeds 9000000000000000000", "--seeds takes at most 1000000 (got 9000000000000000000)"},
		{"--seed 3 --workers 1001", "--workers takes at most 1000 (got 1001)"},
		{"--seed 3 --ops 100001", "--ops takes at most 100000 (got 100001)"},
	} {
		out, errOut, code := run(t, append([]string{"lab", "sim"}, strings.Fields(tc.args)...)...)
		require.Equal(t, 2, code, "%s: %s", tc.args, errOut)
		require.Empty(t, out, tc.args)
		require.Equal(t, "opledger: "+tc.says, usageLine(t, errOut), tc.args)
	}
}

// TestLabDestinations: lab destinations serves the simulated destinations
// and writes the files serve needs; a real serve on them sends to them,
// and faults injected through the control API play out as documented:
// the CRM's lost response is confirmed by a lookup (one record), the
// e-mail's is held for its owner, the payment's 5xx after the charge is
// retried under its key (one charge). Existing files are not overwritten.
func TestLabDestinations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lab := exec.Command(binary, "lab", "destinations", "--addr", "127.0.0.1:0", "--config-dir", dir)
	stdout, err := lab.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, lab.Start())
	t.Cleanup(func() { _ = lab.Process.Kill(); _ = lab.Wait() })
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "lab destinations said nothing")
	base := regexp.MustCompile(`^serving the crm, email and payment destinations at (http://\S+)$`).FindStringSubmatch(sc.Text())
	require.Len(t, base, 2, sc.Text())
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	post := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(base[1]+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		return string(b)
	}
	require.JSONEq(t, `{"queued":1}`, post("/crm/faults", `["lost_response"]`))
	post("/email/faults", `["lost_response"]`)
	post("/payment/faults", `["5xx_after_commit"]`)
	resp, err := http.Post(base[1]+"/crm/faults", "application/json", strings.NewReader(`["nope"]`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	dsn := "sqlite:" + filepath.Join(dir, "ledger.db")
	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "default")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	url := serveURL(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", filepath.Join(dir, "opledger.yaml")))
	for key, body := range map[string]string{
		"ord:1":  `{"action":"crm.create","destination":"crm","payload":{"order":"A-1"}}`,
		"mail:1": `{"action":"email.send","destination":"email","payload":{"to":"customer"}}`,
		"pay:1":  `{"action":"payment.charge","destination":"payment","payload":{"amount":5}}`,
	} {
		req, _ := http.NewRequest(http.MethodPut, url+"/v1/operations/"+key, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, key)
	}
	for key, want := range map[string]string{"ord:1": "succeeded", "mail:1": "held", "pay:1": "succeeded"} {
		deadline := time.Now().Add(time.Minute)
		for {
			out, errOut, code := run(t, "ops", "show", key, "--server", url, "--token", token, "--json")
			require.Equal(t, 0, code, errOut)
			if strings.Contains(out, `"state": "`+want+`"`) {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s is not %s:\n%s", key, want, out)
			time.Sleep(100 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	counters := func(name string) (c struct{ Attempts, Effects, Lookups int }) {
		t.Helper()
		resp, err := http.Get(base[1] + "/" + name + "/counters")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
		return c
	}
	require.Equal(t, struct{ Attempts, Effects, Lookups int }{1, 1, 1}, counters("crm"), "sent once, looked up once")
	require.Equal(t, 1, counters("email").Effects, "held, never sent again")
	pay := counters("payment")
	require.Equal(t, 2, pay.Attempts, "retried under its key")
	require.Equal(t, 1, pay.Effects, "charged once")

	_, errOut, code = run(t, "lab", "destinations", "--addr", "127.0.0.1:0", "--config-dir", dir)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "destinations.yaml exists already, with other content (another --addr?)")
}

// TestLabCrashAfterEffectSaysWhatTheDestinationDid: a worker that dies
// after its call says the destination acted only when it did: with the
// call timed out before the commit, the CRM made nothing (0 actions), and
// the step says so, in a worker process as in the runner's.
func TestLabCrashAfterEffectSaysWhatTheDestinationDid(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	rows := []string{lines[0],
		"no-effect,production,crm,timeout_before_commit,crash after_effect,1,0,0,0,0,in_progress,t,t,e,e",
		"effect,production,crm,none,crash after_effect,1,1,0,0,0,in_progress,t,t,e,e"}
	path := writeFile(t, rows)
	for _, mode := range [][]string{{"lab", "run", "--json", path}, {"lab", "run", "--json", "--crash-in-process", path}} {
		out, errOut, code := run(t, mode...)
		require.Equal(t, 0, code, "%v: %s%s", mode, out, errOut)
		var said []string
		for line := range strings.Lines(out) {
			var r struct {
				Steps []struct{ Explanation string } `json:"steps"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &r), line)
			said = append(said, r.Steps[0].Explanation)
		}
		require.Len(t, said, 2, "%v", mode)
		require.NotContains(t, said[0], "acted", "%v: the CRM made nothing", mode)
		require.Contains(t, said[0], "the lab-crm made nothing", "%v", mode)
		require.Contains(t, said[1], "The lab-crm acted and the worker died before reporting", "%v", mode)
	}
}

// TestLabRunInterruptedPrintsWhatRan: a run stopped partway (Ctrl-C)
// still prints the table of the cases that ran before it says why it
// stopped; before, it printed only the error and the results were lost.
func TestLabRunInterruptedPrintsWhatRan(t *testing.T) {
	t.Parallel()
	lines := caseFile(t)
	normal := lines[1]
	require.True(t, strings.HasPrefix(normal, "normal,"), normal)
	const total = 300
	file := []string{lines[0]}
	for i := range total {
		file = append(file, fmt.Sprintf("normal-%d,%s", i, strings.TrimPrefix(normal, "normal,")))
	}
	path := writeFile(t, file)

	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	cmd := exec.Command(binary, "lab", "run", "--crash-in-process", path)
	cmd.Dir = t.TempDir()
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, tty
	require.NoError(t, cmd.Start())
	require.NoError(t, tty.Close())
	// The progress bar leaves 0% once the first case is done: interrupt
	// the run then, with most of its cases still to run.
	drawn := make(chan string, 1)
	started := make(chan struct{})
	go func() {
		var b []byte
		buf := make([]byte, 4096)
		moved := regexp.MustCompile(`lab run\s+[1-9][0-9]*%`)
		signalled := false
		for {
			n, err := ptmx.Read(buf)
			b = append(b, buf[:n]...)
			if !signalled && moved.Match(b) {
				signalled = true
				close(started)
			}
			if err != nil { // EIO once the process has gone
				drawn <- string(b)
				return
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("no case finished within a minute")
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode())
	terminal := <-drawn

	out := stdout.String()
	require.Contains(t, out, "case  ", "the table's header:\n%s", out)
	ran := regexp.MustCompile(`(?m)^normal-\d+\s+interactive`).FindAllString(out, -1)
	require.NotEmpty(t, ran, "the cases that ran are printed:\n%s", out)
	require.Less(t, len(ran), total, "the run stopped partway")
	require.Contains(t, out, "normal-0  ", "the first case, which finished before the interrupt")
	require.Regexp(t, fmt.Sprintf(`opledger: stopped after %d of %d cases: context canceled`, len(ran), total), terminal)
}
