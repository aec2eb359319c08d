package proxy_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// A 2xx answer over max_response_bytes keeps its reference, wherever it
// sits in the answer: the first caller gets the whole answer, the
// operation the reference read from the whole of it, and a repeat the
// status and headers without body.
func TestLargeAnswerKeepsItsRef(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 2<<20)
	answers := map[string]string{
		"/first": `{"id":"BIG","pad":"` + pad + `"}`,
		"/last":  `{"pad":"` + pad + `","data":[{"id":"no"},{"id":12345678901234567890}]}`,
		"/text":  pad,
		"/dup":   `{"id":"EARLY","pad":"` + pad + `","id":"LATE"}`,
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answers[r.URL.Path])
	}))
	t.Cleanup(up.Close)
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := proxyOn(t, openLedger(t, st),
			proxy.Upstream{Name: "crm", URL: up.URL},
			proxy.Upstream{Name: "deep", Prefix: "/deep/", URL: up.URL, Ref: "/data/1/id"})
		for _, c := range []struct{ path, ref string }{
			{"/first", "BIG"},
			{"/deep/last", "12345678901234567890"},
			{"/text", "attempt:"},
			{"/dup", "LATE"},
		} {
			first := b.send(t, http.MethodPost, c.path, "key"+c.path, token, body1)
			require.Equal(t, http.StatusCreated, first.status)
			require.Equal(t, answers[strings.TrimPrefix(c.path, "/deep")], string(first.body), "the first caller gets the whole answer")
			op, err := b.ledger.Get(t.Context(), b.keyOf(t, c.path))
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			if c.ref == "attempt:" {
				require.True(t, strings.HasPrefix(op.DestinationRef, "attempt:"), op.DestinationRef)
			} else {
				require.Equal(t, c.ref, op.DestinationRef, c.path)
			}
			require.Less(t, len(op.Response), 4096, "only status and headers are saved")

			again := b.send(t, http.MethodPost, c.path, "key"+c.path, token, body1)
			require.Equal(t, http.StatusCreated, again.status)
			require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
			require.Equal(t, "true", again.header.Get(proxy.HeaderBodyOmitted))
			require.Equal(t, "application/json", again.header.Get("Content-Type"))
			require.Empty(t, again.body)
		}
	})
}

// keyOf finds the operation recorded for a request to path.
func (b *bundle) keyOf(t *testing.T, path string) string {
	t.Helper()
	page, err := b.ledger.List(t.Context(), opledger.ListOptions{})
	require.NoError(t, err)
	for _, it := range page.Items {
		op, err := b.ledger.Get(t.Context(), it.Key)
		require.NoError(t, err)
		if strings.Contains(string(op.Payload), `"path":"`+path+`"`) {
			return op.Key
		}
	}
	t.Fatalf("no operation for %s", path)
	return ""
}

// A large 2xx answer whose body breaks off: the operation is uncertain, as
// for a smaller answer, and the caller's answer is broken off too rather
// than ending as if it were complete.
func TestLargeAnswerBrokenOff(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(4<<20) + "\r\n\r\n" + `{"id":"BIG","pad":"` + strings.Repeat("x", 2<<20))
		_ = buf.Flush()
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL})
	req, err := http.NewRequest(http.MethodPost, b.url+"/records", strings.NewReader(body1))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "key-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	_, err = io.Copy(io.Discard, bufio.NewReader(resp.Body))
	resp.Body.Close()
	require.Error(t, err, "the caller sees the answer break off")
	require.Equal(t, opledger.StateUncertain, b.only(t).State)
}
