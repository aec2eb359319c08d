package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// startServe runs 'opledger serve' on a free loopback port and returns its
// base URL and the process.
func startServe(t *testing.T, dsn string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urlRe := regexp.MustCompile(`msg=serving url=(http://\S+)`)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return m[1], cmd
		}
	}
	t.Fatalf("serve never reported its address")
	return "", nil
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
