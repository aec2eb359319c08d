package testdb

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// UnreachablePostgres returns dsn (a PostgreSQL URL) with its host a
// loopback relay to the server, and cut, which closes the relay's
// listener and every connection it carried: after cut the server can no
// longer be reached at that address, as when the database is down or the
// network to it is gone. The relayed DSN's password is password. cut
// returns once every goroutine of the relay has ended; the test's
// cleanup cuts it too.
func UnreachablePostgres(t testing.TB, dsn, password string) (relayed string, cut func()) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := u.Host
	var (
		mu    sync.Mutex
		conns []net.Conn
		// cutDone: the cut has closed conns; a connection accepted
		// before it and relayed after is closed at once.
		cutDone bool
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			if cutDone {
				// Accepted just before the cut, which did not see it.
				mu.Unlock()
				c.Close()
				up.Close()
				continue
			}
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	var once sync.Once
	cut = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			cutDone = true
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(cut)
	u.Host = ln.Addr().String()
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String(), cut
}

// WaitUnreachable returns once ping, a ledger's Ping through a relay
// that was cut, fails to connect: the pool's idle connections died with
// the relay, and each is found dead once before a new one is dialled. It
// fails t if ping succeeds, or still fails otherwise after 100 tries.
func WaitUnreachable(t testing.TB, ping func(context.Context) error) {
	t.Helper()
	for i := 0; ; i++ {
		err := ping(context.Background())
		require.Error(t, err)
		if strings.Contains(err.Error(), "failed to connect") {
			return
		}
		require.Less(t, i, 100, "the pool still hands out dead connections: %v", err)
	}
}
