package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/proxy"
)

// lockedBuffer is a log buffer the fuzz target empties between inputs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was written and empties the buffer.
func (b *lockedBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// fuzzStatuses are the answers the fuzzed upstream gives.
var fuzzStatuses = []int{201, 200, 400, 404, 409, 422, 429, 500, 503, 302}

// rawExchange sends one HTTP/1.1 request, written byte for byte as given,
// on a new connection to addr, and reads the answer and then the
// connection to its end, so that the handler has returned.
func rawExchange(t *testing.T, addr, method, target string, header []string, body []byte) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil { // a hung handler fails the input
		t.Fatal(err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: proxy.test\r\nConnection: close\r\nContent-Length: %d\r\n", method, target, len(body))
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %q: no well-formed answer: %v", method, target, err)
	}
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %q: the answer's body broke off: %v", method, target, err)
	}
	_, _ = io.Copy(io.Discard, br) // to the close: the handler is done
	return resp, answer
}

// checkProblem fails unless an answer the proxy gave itself (not the
// upstream's) is a problem document, or one net/http gave for a request
// it could not parse.
func checkProblem(t *testing.T, what string, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode < 400 || resp.Header.Get("X-From-Upstream") != "" {
		return
	}
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/plain") && strings.HasPrefix(string(body), strconv.Itoa(resp.StatusCode)+" ") {
		return // net/http's own answer to a malformed request
	}
	if ct != "application/problem+json" || !json.Valid(body) {
		t.Fatalf("%s: %d with %q: %q", what, resp.StatusCode, ct, body)
	}
}

// FuzzProxyRequests sends arbitrary Idempotency-Keys, methods, targets
// (path and query) and bodies through the proxy, as raw HTTP/1.1 on
// loopback, to an upstream that echoes the caller's credential in its
// answer's headers. Each input is sent under a credential of its own,
// three times: as given, again, and with another body. The proxy must
// answer each with a well-formed response (a problem document when it
// refuses), never panic, forward a protected request once (unless the
// upstream asked for a retry), replay a decided answer byte for byte,
// refuse other content with 422, and never store the credential, nor
// show it, the upstream's secret base path or its cookie, in an
// operation, its attempts, its timeline or a log line.
func FuzzProxyRequests(f *testing.F) {
	for _, s := range []struct {
		key, method, target string
		body                string
		status              uint8
		cred                string
	}{
		{"k1", "POST", "/items", `{"name":"a"}`, 0, "x"},
		{`"quoted-key"`, "PATCH", "/items/7?api_key=s3cr3tquery", `{"a":1}`, 2, ""},
		{"k2", "POST", "/bot12345:AAtokenpart/sendMessage", "not json", 7, "y"},
		{"k3", "POST", "/files/a%2Fb%7Cv1?q=%ff", "", 6, "z"},
		{"k4", "POST", "/a/..%2Fb", "{}", 0, ""},
		{"k5", "post", "/items", "{}", 0, ""},
		{"k6", "GET", "/items", "", 1, ""},
		{"", "POST", "/items", "{}", 0, ""},
		{"k\x7f", "POST", "/items", "{}", 0, ""},
		{"k7", "POST", "/items/é|{}", `{"x":"\u0000"}`, 9, "w"},
		{"k8", "POST", "http://proxy.test/abs?x=1", "[]", 4, ""},
		{"k9", "POST", "*", "", 0, ""},
		{"k10", "POST", "/x y", "", 0, ""},
		{"k11", "PATCH", "/x;..;/y", "\xff\xfe", 8, "v"},
		{`"k12";p=1`, "POST", "/items", "{}", 0, ""},
		{"k13, k14", "POST", "/items", "{}", 0, ""},
		{`"k15,\"16\""`, "POST", "/items", "{}", 0, ""},
	} {
		f.Add(s.key, s.method, s.target, []byte(s.body), s.status, s.cred)
	}

	var (
		mu     sync.Mutex
		counts = map[string]int{} // forwards by Authorization
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		auth := r.Header.Get("Authorization")
		mu.Lock()
		counts[auth]++
		n := counts[auth]
		mu.Unlock()
		status, err := strconv.Atoi(r.Header.Get("X-Fuzz-Status"))
		if err != nil {
			status = http.StatusCreated
		}
		h := w.Header()
		h.Set("X-From-Upstream", "1")
		h.Set("X-Echo-Auth", auth)
		h.Set("Location", r.URL.RequestURI())
		if token, ok := strings.CutPrefix(auth, "Bearer "); ok {
			h.Set("Set-Cookie", "sid="+token+"; HttpOnly")
		}
		h.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("R%d", n), "uri": r.URL.RequestURI()})
	}))
	f.Cleanup(up.Close)
	const baseSecret = "s3cr3tbase"
	u := proxy.Upstream{Name: "crm", URL: up.URL + "/base/" + baseSecret}
	policies, err := proxy.RetryPolicies([]proxy.Upstream{u})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(f.TempDir(), "proxy.db"),
		opledger.Options{DestinationRetryPolicies: policies, SQLiteSynchronousNormal: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	logs := &lockedBuffer{}
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Close() })
	serverErrors := &lockedBuffer{}
	srv := httptest.NewUnstartedServer(p)
	srv.Config.ErrorLog = log.New(serverErrors, "", 0)
	srv.Start()
	f.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	var inputs int

	f.Fuzz(func(t *testing.T, key, method, target string, body []byte, status uint8, cred string) {
		oneLine := strings.NewReplacer("\r", "", "\n", "")
		key, method, target = oneLine.Replace(key), oneLine.Replace(method), oneLine.Replace(target)
		cred = strings.Map(func(r rune) rune {
			if r <= ' ' || r > '~' {
				return -1
			}
			return r
		}, cred)
		inputs++
		token := fmt.Sprintf("fz%dtok%s", inputs, cred)
		upstreamStatus := fuzzStatuses[int(status)%len(fuzzStatuses)]
		header := []string{"Authorization: Bearer " + token, "Idempotency-Key: " + key, "X-Fuzz-Status: " + strconv.Itoa(upstreamStatus)}
		forwards := func() int {
			mu.Lock()
			defer mu.Unlock()
			return counts["Bearer "+token]
		}
		logs.take()

		r1, b1 := rawExchange(t, addr, method, target, header, body)
		checkProblem(t, "first", r1, b1)
		r2, b2 := rawExchange(t, addr, method, target, header, body)
		checkProblem(t, "repeat", r2, b2)
		other := append(bytes.Clone(body), 'x')
		r3, b3 := rawExchange(t, addr, method, target, header, other)
		checkProblem(t, "other body", r3, b3)
		if e := serverErrors.take(); strings.Contains(e, "panic") {
			t.Fatalf("the proxy panicked: %s", e)
		}

		protected := method == http.MethodPost || method == http.MethodPatch
		if !protected {
			return
		}
		forwarded := r1.Header.Get("X-From-Upstream") != ""
		if !forwarded {
			if n := forwards(); n != 0 {
				t.Fatalf("a refused request (%d %s) was forwarded %d times", r1.StatusCode, b1, n)
			}
			return
		}
		retryable := upstreamStatus == 429 || upstreamStatus == 503
		if retryable {
			return // a repeat may be forwarded again
		}
		if n := forwards(); n != 1 {
			t.Fatalf("forwarded %d times (upstream status %d; answers %d, %d, %d)", n, upstreamStatus, r1.StatusCode, r2.StatusCode, r3.StatusCode)
		}
		decided := upstreamStatus < 300 || upstreamStatus >= 400 && upstreamStatus < 500
		if decided {
			if r2.StatusCode != r1.StatusCode || !bytes.Equal(b1, b2) || r2.Header.Get(proxy.HeaderReplayed) != "true" {
				t.Fatalf("repeat: %d %q (replayed %q), first: %d %q", r2.StatusCode, b2, r2.Header.Get(proxy.HeaderReplayed), r1.StatusCode, b1)
			}
			for _, name := range []string{"X-Echo-Auth", "Location", "Set-Cookie"} {
				if got, want := r2.Header.Values(name), r1.Header.Values(name); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("replayed %s: %q, first: %q", name, got, want)
				}
			}
		} else if r2.StatusCode != http.StatusConflict {
			t.Fatalf("repeat of an uncertain request: %d %s", r2.StatusCode, b2)
		}
		if r3.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("same key, other body: %d %s", r3.StatusCode, b3)
		}

		// What the ledger keeps and shows.
		callerKey, err := proxy.ParseKey([]string{key})
		if err != nil {
			t.Fatalf("a forwarded request's key %q does not parse: %v", key, err)
		}
		opKey := proxy.OperationKey("crm", "Bearer "+token, callerKey)
		op, err := l.Get(ctx, opKey)
		if err != nil {
			t.Fatalf("the forwarded request's operation: %v", err)
		}
		attempts, err := l.Attempts(ctx, opKey)
		if err != nil {
			t.Fatal(err)
		}
		timeline, err := l.Timeline(ctx, opKey)
		if err != nil {
			t.Fatal(err)
		}
		inRequest := strings.Contains(target, token) || bytes.Contains(body, []byte(token))
		var stored []string
		stored = append(stored, string(op.Payload), op.LastError)
		for _, a := range attempts {
			stored = append(stored, a.Error)
		}
		for _, e := range timeline {
			stored = append(stored, e.Evidence)
		}
		var s struct {
			Header map[string][]string `json:"header"`
		}
		if err := json.Unmarshal(op.Response, &s); err != nil && len(op.Response) > 0 {
			t.Fatalf("saved answer: %v", err)
		}
		for name, values := range s.Header {
			if http.CanonicalHeaderKey(name) != "Set-Cookie" { // stored for the replay, shown masked
				stored = append(stored, values...)
			}
		}
		for _, text := range stored {
			if !inRequest && strings.Contains(text, token) {
				t.Fatalf("the credential is stored in clear: %q", text)
			}
		}
		shown, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		shownAttempts, err := json.Marshal(op.MaskedAttempts(attempts))
		if err != nil {
			t.Fatal(err)
		}
		logged := logs.take()
		for what, text := range map[string]string{"shown operation": string(shown), "shown attempts": string(shownAttempts), "log": logged} {
			if strings.Contains(text, token) {
				t.Fatalf("%s holds the credential: %s", what, text)
			}
			if strings.Contains(text, baseSecret) {
				t.Fatalf("%s holds the upstream's base path: %s", what, text)
			}
		}
	})
}
