package executor_test

import (
	"bufio"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestActedBeforeBodyIsNeverResent: a destination that acts on a request
// once it has read its headers (an upload that creates its record first)
// and then goes away while the body is still arriving leaves the attempt
// uncertain: it was recorded retryable ("not sent"), and the next attempt
// sent it again — a second effect.
func TestActedBeforeBodyIsNeverResent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var acted atomic.Int32
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
					acted.Add(1) // committed; then the process dies
					break
				}
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	files, err := destination.NewHTTP(destination.HTTPConfig{Name: "files", URL: "http://" + ln.Addr().String() + "/files", Ref: "/id",
		Timeout: destination.Duration(5 * time.Second)},
		destination.LoadOptions{})
	require.NoError(t, err)
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{files} })
	r.Record("upload:U1:create", "files", `{"content":"`+strings.Repeat("a", 4<<20)+`"}`)

	op := r.Step()
	require.Equal(t, opledger.StateUncertain, op.State, "last error: %s", op.LastError)
	require.Nil(t, r.Step(), "nothing is due: the uncertain attempt is not sent again")
	require.EqualValues(t, 1, acted.Load())
}
