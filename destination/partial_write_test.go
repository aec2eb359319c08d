package destination_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// earlyServer is a destination on a raw socket that acts on a request as
// soon as it has read its headers, as HTTP allows (an upload that creates
// its record first, an endpoint that ignores the body), and goes away
// without reading the body: answering first if answer is set, resetting
// the connection otherwise (it crashed after it committed).
func earlyServer(t *testing.T, answer string) (url string, acted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	acted = new(atomic.Int32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					break
				}
				if line == "\r\n" {
					acted.Add(1)
					break
				}
			}
			if answer != "" {
				_, _ = c.Write([]byte(answer))
			} else {
				_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a close
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return "http://" + ln.Addr().String(), acted
}

// largeBody is large enough that the request is still being written
// when the server goes away.
var largeBody = bytes.Repeat([]byte("a"), 4<<20)

// TestSendHTTPFailedWriteMayHaveReached: a write that fails part way
// does not prove that the destination did nothing: a server may act on
// the part it read (the headers) before the body has arrived, and even
// answer. Such a failure is uncertain, never retryable (which would send
// the request again).
func TestSendHTTPFailedWriteMayHaveReached(t *testing.T) {
	t.Parallel()

	t.Run("ResetAfterActing", func(t *testing.T) {
		t.Parallel()
		url, acted := earlyServer(t, "")
		req, err := http.NewRequest(http.MethodPost, url+"/records", bytes.NewReader(largeBody))
		require.NoError(t, err)
		resp, err := destination.SendHTTP(newClient(t), req, destination.HTTPPolicy{})
		require.Nil(t, resp)
		require.EqualValues(t, 1, acted.Load())
		requireOutcome(t, err, opledger.OutcomeUncertain, true)
	})

	t.Run("HTTPCall", func(t *testing.T) {
		t.Parallel()
		url, acted := earlyServer(t, "")
		h := newHTTP(t, destination.HTTPConfig{Name: "files", URL: url + "/files", Ref: "/id"})
		payload := `{"content":"` + string(largeBody) + `"}`
		_, err := h.Call(context.Background(), call(operation("upload:1", payload)))
		require.EqualValues(t, 1, acted.Load())
		outcome, _ := opledger.OutcomeOf(err)
		require.Equal(t, opledger.OutcomeUncertain, outcome, "error: %v", err)
	})

	t.Run("AnsweredThenClosed", func(t *testing.T) {
		t.Parallel()
		// Whether net/http reports the answer or the failed write is a
		// race; neither may be retryable.
		url, acted := earlyServer(t, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"id\":\"A\"}")
		for i := range 20 {
			req, err := http.NewRequest(http.MethodPost, url+"/records", bytes.NewReader(largeBody))
			require.NoError(t, err)
			resp, err := destination.SendHTTP(newClient(t), req, destination.HTTPPolicy{})
			require.EqualValues(t, i+1, acted.Load())
			if resp != nil {
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, resp.StatusCode)
				require.NoError(t, resp.Body.Close())
				continue
			}
			requireOutcome(t, err, opledger.OutcomeUncertain, true)
		}
	})
}
