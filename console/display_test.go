package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// fetch returns the status and the body of the page at path.
func (s *consoleSession) fetch(path string) (int, string) {
	s.t.Helper()
	resp, err := s.hc.Get(s.base + path)
	require.NoError(s.t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(s.t, err)
	return resp.StatusCode, string(body)
}

// section is the part of page from the first from to the next to after it.
func section(t *testing.T, page, from, to string) string {
	t.Helper()
	i := strings.Index(page, from)
	require.GreaterOrEqual(t, i, 0, "the page has %s", from)
	j := strings.Index(page[i:], to)
	require.GreaterOrEqual(t, j, 0, "%s ends with %s", from, to)
	return page[i : i+j]
}

// duplicates makes operations with duplicate effects on l, whose clock
// runs *offset ahead: a first attempt is dispatched and loses its lease,
// an operator authorizes a retry, which succeeds, then the first reports
// success with another reference.
type duplicates struct {
	t      *testing.T
	l      *opledger.Ledger
	offset *atomic.Int64
}

// lose claims key, dispatches the call and returns the claim: its report
// is yet to come.
func (d duplicates) lose(key string) *opledger.Claim {
	d.t.Helper()
	ctx := context.Background()
	cl, err := d.l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}})
	require.NoError(d.t, err)
	_, err = d.l.Dispatch(ctx, key, cl.AttemptID, cl.FencingToken)
	require.NoError(d.t, err)
	return cl
}

// twice lets lost's lease end, retries key with success, then has lost
// report its own: the destination acted twice.
func (d duplicates) twice(key string, lost *opledger.Claim) {
	d.t.Helper()
	ctx := context.Background()
	d.offset.Add(int64(time.Minute)) // past the 30 s lease
	_, err := d.l.ExpireLeases(ctx)
	require.NoError(d.t, err)
	_, _, err = d.l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "not in the CRM"})
	require.NoError(d.t, err)
	retry, err := d.l.Claim(ctx, key, opledger.ClaimOptions{})
	require.NoError(d.t, err)
	_, err = d.l.Report(ctx, key, retry.AttemptID, retry.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "second-" + key})
	require.NoError(d.t, err)
	_, err = d.l.Report(ctx, key, lost.AttemptID, lost.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "first-" + key})
	require.ErrorIs(d.t, err, opledger.ErrStaleFencingToken)
}

// TestDashboardDuplicates: the dashboard lists the operations whose
// incident came last, not the last recorded: an old operation's late
// report comes first; and when the counter counts more than the list,
// because operations were compacted, it says how many more and why.
func TestDashboardDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Worker: "worker-7", Retention: time.Hour})
	srv := httptest.NewServer(c)
	defer srv.Close()
	d := duplicates{t: t, l: l, offset: offset}

	// One incident on an operation since compacted.
	d.twice("gone:dup", d.lose("gone:dup"))
	offset.Add(int64(2 * time.Hour))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
	s := signIn(t, srv.URL, token)
	page := s.get("/dashboard")
	require.Contains(t, page, `<span class="n">1</span><span class="l">duplicate effects detected</span>`)
	require.Contains(t, page, `<p id="duplicates-compacted">1 more duplicate effect on compacted operations`, "the counter is explained, not left above an empty list")
	require.NotContains(t, page, `id="duplicates"`)
	// old:first is recorded first, then twenty more; its incident comes
	// after all of theirs.
	lost := d.lose("old:first")
	for i := range 20 {
		key := fmt.Sprintf("dup:%02d", i)
		d.twice(key, d.lose(key))
	}
	d.twice("old:first", lost)

	page = s.get("/dashboard")
	require.Contains(t, page, `<span class="n">22</span><span class="l">duplicate effects detected</span>`)
	table := section(t, page, `<table class="queue" id="duplicates">`, `</table>`)
	rows := regexp.MustCompile(`<th scope="row"><a href="/operations/([^"]+)">`).FindAllStringSubmatch(table, -1)
	require.Len(t, rows, 20)
	require.Equal(t, "old:first", rows[0][1], "the latest incident first, though its operation is the oldest")
	require.Equal(t, "dup:19", rows[1][1])
	require.NotContains(t, table, "dup:00", "the earliest incident is the one left out")
	// On a phone the header row is hidden: each value says what it is.
	require.Equal(t, strings.Count(table, "<td"), strings.Count(table, `<td data-label="`), "every cell labelled")
	require.Contains(t, table, `<td data-label="Confirmed reference"><bdi>second-old:first</bdi></td>`)
	require.Contains(t, page, "The 20 most recently updated of 21 are shown")
	require.Contains(t, page, `<p id="duplicates-compacted">1 more duplicate effect on compacted operations: still counted, but compaction removed their records, so they are listed nowhere.</p>`)
}

// TestDashboardRecovery: with no decision taken there is no recovery time
// to show; once there is, it reads in hours and minutes, not seconds.
func TestDashboardRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	figure := func(page, id string) string {
		m := regexp.MustCompile(`<span class="n" id="` + id + `">([^<]*)</span>`).FindStringSubmatch(page)
		require.Len(t, m, 2, "the dashboard shows %s", id)
		return m[1]
	}

	page := s.get("/dashboard")
	require.Equal(t, "–", figure(page, "recovery-mean"), "no decision: nothing measured")
	require.Equal(t, "–", figure(page, "recovery-p90"))
	require.Contains(t, page, "mean operator recovery (0 decisions)")

	heldOp(t, l, opledger.Intent{Key: "slow:1"}, "timeout", "no lookup")
	offset.Add(int64(3*time.Hour + 12*time.Minute))
	_, _, err := l.Resolve(ctx, "slow:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn"})
	require.NoError(t, err)
	page = s.get("/dashboard")
	require.Equal(t, "3 h 12 min", figure(page, "recovery-mean"))
	require.Equal(t, "3 h 12 min", figure(page, "recovery-p90"))
	require.Contains(t, page, "mean operator recovery (1 decision)")
}

// TestDashboardApprovalWait: the dashboard says how long the operation
// awaiting approval the longest has waited, and how many wait; "–" when
// none does.
func TestDashboardApprovalWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	wait := func() string {
		m := regexp.MustCompile(`<span class="n" id="approval-wait">([^<]*)</span>`).FindStringSubmatch(s.get("/dashboard"))
		require.Len(t, m, 2, "the dashboard shows the wait")
		return m[1]
	}
	require.Equal(t, "–", wait(), "none awaits approval")
	for _, key := range []string{"refund:1", "refund:2"} {
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "payments.refund", Destination: "payments",
			Payload: json.RawMessage(`{}`), RequiresApproval: true})
		require.NoError(t, err)
		offset.Add(int64(2*time.Hour + 5*time.Minute))
	}
	require.Equal(t, "4 h 10 min", wait(), "refund:1, recorded first")
	require.Contains(t, s.get("/dashboard"), "longest wait for an approval (2 awaiting)")
}

// TestQueueWaiting: the queue's age of an operation is how long it has
// waited for someone: since it became uncertain or held, not since it
// was recorded; for a failed one, or one awaiting approval (here, of a
// revision), since it entered that state, which a later repeat naming
// an owner does not restart. Those awaiting approval come between the
// uncertain and the failed ones.
func TestQueueWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	srv := httptest.NewServer(c)
	defer srv.Close()

	for _, key := range []string{"late:held", "late:failed", "late:approval"} {
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	offset.Add(int64(10 * time.Hour))
	heldOp(t, l, opledger.Intent{Key: "late:held"}, "timeout", "no lookup")
	_, _, err := l.Revise(ctx, "late:approval", opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2})
	require.NoError(t, err)
	cl, err := l.Claim(ctx, "late:failed", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "late:failed", cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422"})
	require.NoError(t, err)
	offset.Add(int64(3*time.Hour + 12*time.Minute))
	for _, in := range []opledger.Intent{{Key: "late:failed", Payload: json.RawMessage(`{}`), Version: 1},
		{Key: "late:approval", Payload: json.RawMessage(`{"n":2}`), Version: 2}} {
		in.Action, in.Destination, in.Owner = "crm.create", "crm", "sales-ops"
		op, _, err := l.Record(ctx, in)
		require.NoError(t, err)
		require.Equal(t, "sales-ops", op.Owner, "the repeat named an owner: a write")
	}

	page := signIn(t, srv.URL, token).get("/")
	require.Contains(t, page, `<th scope="col">Waiting</th>`)
	require.Contains(t, page, "Waiting: since the operation became uncertain or held; for one awaiting approval or failed, since it entered that state.")
	for _, key := range []string{"late:held", "late:failed", "late:approval"} {
		row := section(t, page, `<a href="/operations/`+key+`">`, `</tr>`)
		require.Regexp(t, `<td data-label="Waiting"><time datetime="[^"]+Z" title="[^"]+ UTC">3 h 12 min</time></td>`, row, "%s has waited since it was held, failed or revised, not since it was recorded 13 h ago", key)
	}
	require.Contains(t, section(t, page, `<a href="/operations/late:approval">`, `</tr>`), `<span class="badge state-awaiting_approval">awaiting_approval</span>`)
	require.Contains(t, page, `<a href="/operations?state=awaiting_approval">all awaiting_approval</a>`)
	require.Contains(t, page, "3 operations need attention.")
	require.Less(t, strings.Index(page, "late:held"), strings.Index(page, "late:approval"), "held first")
	require.Less(t, strings.Index(page, "late:approval"), strings.Index(page, "late:failed"), "then those awaiting approval, then the failed ones")
}

// TestSampleSkipsFailingTenant: a tenant whose counters cannot be read is
// logged and skipped; the tenants after it are still sampled, and the
// dashboard draws their chart, each panel on its own scale.
func TestSampleSkipsFailingTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme", Worker: "worker-7"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	// A token of a tenant this release refuses ("bad tenant" is no key),
	// written straight into the store as an older release or a hand
	// edit could have, and listed before acme's.
	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "sqlite:")+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO tokens (id, tenant, name, hash, created_at) VALUES ('tok_old', 'bad tenant', 'old', 'not-a-hash', 1)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	heldOp(t, l, opledger.Intent{Key: "held:1"}, "timeout", "no lookup")

	logs := &testrig.LogBuffer{}
	c, err := console.New(l, console.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	srv := httptest.NewServer(c)
	defer srv.Close()

	require.NoError(t, c.Sample(ctx))
	require.NoError(t, c.Sample(ctx))
	require.Contains(t, logs.String(), `msg="console: sample counters" tenant="bad tenant"`)
	page := signIn(t, srv.URL, token).get("/dashboard")
	require.NotContains(t, page, "The chart fills in", "acme was sampled after the tenant that failed")
	require.Contains(t, page, `<figure class="chart">`)
	require.Contains(t, page, ">unresolved operations (uncertain and held)</text>")
	require.Contains(t, page, ">attempts and confirmed effects (running totals)</text>")
	require.Regexp(t, `<text class="tick max"[^>]*>1</text>`, page, "the unresolved panel's scale ends at its highest value")
	require.Contains(t, page, "unresolved (now 1, highest 1)")
	require.Regexp(t, `aria-label="[^"]* from \d{4}-\d\d-\d\d \d\d:\d\d – `, page, "the range is dated")
}

// TestInvisibleText: characters that show nothing of themselves (zero
// width spaces and joiners, the byte order mark, soft hyphens, tags, …)
// are shown as escapes wherever stored text is, like the bidi controls,
// so that two values that look alike are told apart.
func TestInvisibleText(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-\u200b7"})
	heldOp(t, l, opledger.Intent{Key: "zw:1", Owner: "ops\u200bteam", Destination: "crm", Action: "crm.create\ufeff",
		Payload: json.RawMessage("{\"note\":\"x\u00ady\U000e0041\"}")},
		"time\u200dout", "no \u2060lookup")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	s.decide("zw:1", url.Values{"decision": {"cancel"}, "reason": {"with\u180edrawn"}, "operator": {"Maria\u200c"}})
	heldOp(t, l, opledger.Intent{Key: "zw:2", Owner: "\u200cowner", Action: "mail.send\u034f", Destination: "mail"}, "\ufefferror", "x")

	invisible := "\u200b\u200c\u200d\ufeff\u00ad\u2060\u180e\u034f\U000e0041"
	for path, want := range map[string][]string{
		"/operations/zw:1": {`ops\u200bteam`, `crm.create\ufeff`, `time\u200dout`, `no \u2060lookup`, `x\u00ady\U000e0041`, `with\u180edrawn`, consoleActor(t, l, token, `Maria\u200c`), `worker-\u200b7`},
		"/":                {`\u200cowner`, `\ufefferror`},
		"/operations":      {`ops\u200bteam`, `\u200cowner`},
		"/operations/zw:2": {`mail.send\u034f`},
	} {
		page := s.get(path)
		require.False(t, strings.ContainsAny(page, invisible), "%s holds an invisible character", path)
		for _, w := range want {
			require.Contains(t, page, w, path)
		}
	}

	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)
	for _, path := range []string{"/operations/zw:1", "/", "/operations"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+path), chromedp.WaitVisible(`h1`)))
		require.False(t, eval[bool](t, ctx, `/[\p{Cf}\u034f\u3164\ufe00-\ufe0f]/u.test(document.querySelector('main').innerText)`),
			"%s shows an invisible character", path)
	}
	require.Equal(t, `\u200cowner`, pageText(t, ctx, `#operations tr:has(a[href="/operations/zw:2"]) td:nth-child(4) bdi`))
}

// TestLongLists: an operation's timeline and attempts, and an event's
// deliveries, are shown up to 100 each (the first and the newest), with
// how many there are and how to see them all.
func TestLongLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7",
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 1000}})
	srv := httptest.NewServer(c)
	defer srv.Close()

	// 301 deliveries of one event.
	for i := range 301 {
		_, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: "evt-1", DeliveryID: fmt.Sprintf("d%03d", i),
			Type: "submission.accepted", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	// An uncertain operation whose reconciliation was deferred 150 times.
	cl, err := l.Claim(ctx, "tl:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "tl:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "tl:1", cl.AttemptID, cl.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, "tl:1", cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	for i := range 150 {
		_, err = l.DeferReconcile(ctx, "tl:1", 0, fmt.Sprintf("lookup %d failed", i))
		require.NoError(t, err)
	}
	timeline, err := l.Timeline(ctx, "tl:1")
	require.NoError(t, err)
	// An operation tried 105 times.
	for i := range 105 {
		in := &opledger.Intent{Key: "att:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
		cl, err := l.Claim(ctx, "att:1", opledger.ClaimOptions{Intent: in})
		require.NoError(t, err, "attempt %d", i+1)
		_, err = l.Report(ctx, "att:1", cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: fmt.Sprintf("503 number %d", i+1)})
		require.NoError(t, err)
	}

	s := signIn(t, srv.URL, token)
	page := s.get("/events/forms/evt-1")
	deliveries := section(t, page, `<table id="deliveries">`, `</table>`)
	require.Equal(t, 100, strings.Count(deliveries, "<tr><td>"), "the first delivery and the newest 99")
	require.Contains(t, deliveries, "d000")
	require.Contains(t, deliveries, "d300")
	require.NotContains(t, deliveries, "d201")
	require.Contains(t, deliveries, "d202")
	require.Contains(t, deliveries, "… 201 deliveries not shown")
	require.Contains(t, page, "301 deliveries, 300 of them duplicates")
	require.Contains(t, page, "<code>opledger events show forms evt-1</code>")

	page = s.get("/operations/tl:1")
	entries := section(t, page, `<ol class="timeline" id="timeline">`, `</ol>`)
	require.Equal(t, 100, strings.Count(entries, "<li><time datetime="))
	require.Contains(t, entries, fmt.Sprintf(`<li class="gap">… %d entries not shown</li>`, len(timeline)-100))
	require.Contains(t, entries, "lookup 149 failed", "the newest")
	require.NotContains(t, entries, "lookup 0 failed")
	require.Contains(t, page, fmt.Sprintf("%d entries: the first and the newest 99 are shown.", len(timeline)))
	require.Contains(t, page, "<code>opledger ops show tl:1</code>")

	page = s.get("/operations/att:1")
	attempts := section(t, page, `<table id="attempts">`, `</table>`)
	require.Equal(t, 100, strings.Count(attempts, "<tr><td>"))
	require.Contains(t, attempts, "503 number 1<")
	require.Contains(t, attempts, "503 number 105<")
	require.NotContains(t, attempts, "503 number 6<")
	require.Contains(t, attempts, "… 5 attempts not shown")
	require.Contains(t, page, "105 attempts: the first and the newest 99 are shown.")
}

// TestLabKeepsRecentSteps: a scenario played for long shows its newest
// steps and says how many came before.
func TestLabKeepsRecentSteps(t *testing.T) {
	t.Parallel()
	_, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	csrf := csrfField.FindStringSubmatch(s.get("/lab"))
	require.Len(t, csrf, 2)
	for range 53 {
		code, _ := s.post("/lab/normal", url.Values{"step": {"repeat"}, "csrf": {csrf[1]}})
		require.Equal(t, http.StatusSeeOther, code)
	}
	page := s.get("/lab")
	steps := section(t, page, `<ol class="steps" id="normal-steps">`, `</ol>`)
	require.Equal(t, 50, strings.Count(steps, "<li>"))
	require.Contains(t, steps, "<strong>4. ")
	require.Contains(t, steps, "<strong>53. ")
	require.NotContains(t, steps, "<strong>3. ")
	require.Contains(t, page, `<p class="hint" id="normal-earlier">3 earlier steps are not shown: the page keeps the newest 50. The counters count them all.</p>`)
	require.Contains(t, page, `id="normal-attempts">53<`)
}

// TestOperationsPage: every operation, not only the exceptions, can be
// listed, filtered by state, owner and destination, a page at a time,
// without payloads; filters it cannot apply are refused in words.
func TestOperationsPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	c.SetPageSize(2)
	srv := httptest.NewServer(c)
	defer srv.Close()

	heldOp(t, l, opledger.Intent{Key: "h:1", Owner: "team-a", Payload: json.RawMessage(`{"contact":{"email":"ana@example.invalid"}}`),
		SensitiveFields: []string{"contact.email"}}, "timeout", "no lookup")
	for i := 1; i <= 5; i++ {
		_, _, err := l.Record(ctx, opledger.Intent{Key: fmt.Sprintf("p:%d", i), Action: "mail.send", Destination: "mail", Owner: "team-b",
			Payload: json.RawMessage(`{"template":"welcome"}`)})
		require.NoError(t, err)
	}
	s := signIn(t, srv.URL, token)
	// Open by key: the operation's page, or its "not found".
	for query, want := range map[string]string{"key=+p:3+": "/operations/p:3", "key=p:9": "/operations/p:9", "key=a%2Fb": "/operations/a%2Fb"} {
		resp, err := s.hc.Get(srv.URL + "/operations?" + query)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, query)
		require.Equal(t, want, resp.Header.Get("Location"), query)
	}
	require.Contains(t, s.get("/operations/p:3"), "<h1>p:3 <span")
	keys := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<th scope="row"><a href="/operations/([^"]+)">`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	next := func(page string) string {
		m := regexp.MustCompile(`<a href="([^"]+)" id="next-page">`).FindStringSubmatch(page)
		if m == nil {
			return ""
		}
		return html.UnescapeString(m[1])
	}

	// Pages of two, newest first, each page keeping the filter.
	page := s.get("/operations?state=pending")
	require.Equal(t, []string{"p:5", "p:4"}, keys(page))
	require.Contains(t, page, "5 operations match; the newest first.")
	first := next(page)
	require.Contains(t, first, "state=pending")
	page = s.get(first)
	require.Equal(t, []string{"p:3", "p:2"}, keys(page))
	require.Contains(t, page, `<a href="/operations?state=pending">← First page</a>`)
	page = s.get(next(page))
	require.Equal(t, []string{"p:1"}, keys(page))
	require.Empty(t, next(page), "the last page")

	page = s.get("/operations?state=held")
	require.Equal(t, []string{"h:1"}, keys(page))
	require.Contains(t, page, "1 operation matches;")
	require.Contains(t, page, `<option value="held" selected>held</option>`)
	require.Contains(t, page, `held</span>`)

	c.SetPageSize(100)
	page = s.get("/operations")
	require.Len(t, keys(page), 6)
	require.Contains(t, page, "6 operations match;")
	require.NotContains(t, page, "ana@example.invalid", "no payload")
	require.NotContains(t, page, "contact")
	require.NotContains(t, page, "welcome")
	page = s.get("/operations?owner=team-a&destination=crm")
	require.Equal(t, []string{"h:1"}, keys(page))
	require.NotContains(t, page, "match;", "no total for an owner or destination: no count gives it")
	require.Contains(t, page, `id="f-owner" name="owner" value="team-a"`)
	page = s.get("/operations?state=pending,held&owner=team-b")
	require.Len(t, keys(page), 5)
	require.Contains(t, page, `<option value="pending,held" selected>pending,held</option>`)

	// A failed operation says why.
	_, _, err := l.Resolve(ctx, "p:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn"})
	require.NoError(t, err)
	page = s.get("/operations?state=failed")
	require.Equal(t, []string{"p:1"}, keys(page))
	require.Contains(t, page, `<span class="badge state-failed">failed (cancelled)</span>`)

	// What the list cannot give is refused, in words, with the form.
	c.SetPageSize(2)
	cursor, err := url.ParseQuery(strings.TrimPrefix(first, "/operations?"))
	require.NoError(t, err)
	for path, says := range map[string]string{
		"/operations?state=nope":                                   "There is no state “nope”. The states are awaiting_approval, pending, in_progress, uncertain, held, succeeded, failed.",
		"/operations?owner=%FF":                                    "The owner holds characters the ledger cannot store",
		"/operations?destination=a%00b":                            "The destination holds characters the ledger cannot store",
		"/operations?state=held&cursor=" + cursor.Get("cursor"):    "That page link does not continue this list: it belongs to other filters",
		"/operations?state=pending&cursor=not-a-cursor-at-all":     "That page link does not continue this list",
		"/operations?state=pending&cursor=" + cursor.Get("cursor"): "",
	} {
		code, body := s.fetch(path)
		if says == "" {
			require.Equal(t, http.StatusOK, code, path)
			continue
		}
		require.Equal(t, http.StatusBadRequest, code, path)
		m := regexp.MustCompile(`<p class="error" role="alert" id="filter-error">([^<]*)</p>`).FindStringSubmatch(body)
		require.Len(t, m, 2, path)
		require.Contains(t, html.UnescapeString(m[1]), says, path)
		require.Contains(t, body, `<form method="get" action="/operations"`, "the filter form stays, to correct the filter")
		require.Empty(t, keys(body))
	}

	// The dashboard's state table and the queue's caption link here.
	dashboard := s.get("/dashboard")
	require.Contains(t, dashboard, `<a href="/operations?state=pending" aria-label="4 pending: list them">4</a>`)
	require.Contains(t, dashboard, `<a href="/operations?state=held" aria-label="1 held: list them">1</a>`)
	require.Contains(t, s.get("/"), `<a href="/operations?state=held">all held</a>`)
}

// TestPageThatFailsToRender: a page whose template fails half way is
// answered 500 with the error page, in the session's header, never 200
// with the half already written.
func TestPageThatFailsToRender(t *testing.T) {
	t.Parallel()
	_, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	c.BreakPage("dashboard")
	status, page := s.fetch("/dashboard")
	require.Equal(t, http.StatusInternalServerError, status)
	require.NotContains(t, page, "the start of the page")
	require.Contains(t, page, "This page could not be shown: the server&#39;s log says why.")
	require.Contains(t, page, "tenant <strong>acme</strong>", "the header of the signed-in session")
	require.Contains(t, s.get("/"), "Exception queue", "the other pages are unaffected")
}

// TestDashboardProcesses: the dashboard counts the processes that
// maintain the ledger, and those with other settings than this server's.
func TestDashboardProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	open := func(o opledger.Options) *opledger.Ledger {
		t.Helper()
		o.Tenant = "acme"
		l, err := opledger.Open(ctx, dsn, o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		return l
	}
	l := open(opledger.Options{DestinationsRequiringApproval: []string{"payments"}})
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	c, err := console.New(l, console.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	counter := func() string {
		t.Helper()
		return section(t, s.get("/dashboard"), `<span class="n" id="processes">`, `</div>`)
	}

	require.Contains(t, counter(), `0</span><span class="l">processes maintain the ledger</span>`, "none announced")
	require.NotContains(t, s.get("/dashboard"), `id="processes-list"`, "no list of none")
	_, err = l.Announce(ctx, opledger.AnnounceOptions{})
	require.NoError(t, err)
	require.Contains(t, counter(), `1</span><span class="l">process maintains the ledger</span>`, "one, in the singular")
	same, other := open(opledger.Options{DestinationsRequiringApproval: []string{"payments"}}), open(opledger.Options{})
	for _, p := range []*opledger.Ledger{same, other} {
		_, err = p.Announce(ctx, opledger.AnnounceOptions{})
		require.NoError(t, err)
	}
	require.Contains(t, counter(), `3</span><span class="l">processes maintain the ledger, 1 with other settings than this server's (listed below)</span>`)

	// The list below: in the order they started, this server first.
	rows := strings.Split(section(t, s.get("/dashboard"), `<table class="queue" id="processes-list">`, `</tbody>`), "<tr>")[2:]
	require.Len(t, rows, 3)
	pid := fmt.Sprintf(`<td data-label="PID">%d</td>`, os.Getpid())
	for i, row := range rows {
		require.Contains(t, row, pid)
		require.Equal(t, i == 0, strings.Contains(row, "(this server)"), "row %d", i)
	}
	require.Contains(t, rows[0], `<td data-label="Settings other than this server's">none</td>`)
	require.Contains(t, rows[1], `<td data-label="Settings other than this server's">none</td>`)
	require.Contains(t, rows[2], `<td data-label="Settings other than this server's" class="error"><code>require_approval</code></td>`)
}

// TestDashboardStuckWorkflows: the dashboard counts the workflows that
// cannot go on, which hold no operation and so no other figure counts,
// and links to where the queue lists them.
func TestDashboardStuckWorkflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	count := func() string {
		m := regexp.MustCompile(`<span class="n" id="stuck-workflows">([^<]*)</span>`).FindStringSubmatch(s.get("/dashboard"))
		require.Len(t, m, 2, "the dashboard shows the count")
		return m[1]
	}
	require.Equal(t, "0", count())
	require.NotContains(t, s.get("/dashboard"), `href="/#stuck"`)
	_, _, err := l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	cl, err := l.Claim(ctx, "wf:1/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:1/a", cl.AttemptID, cl.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
	require.Equal(t, "1", count())
	require.Contains(t, s.get("/dashboard"), `<a href="/#stuck">workflows that cannot go on</a>`)
	require.Contains(t, s.get("/"), `id="stuck"`, "the link's target")
}
