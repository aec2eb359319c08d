package destination

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMayHaveReachedUnusedConnection: net/http's HTTP/2 error for a new
// connection that closed before carrying any request says that nothing
// was written, even after a connection was obtained; only its exact text
// does, not a text that merely contains it (a server's words in a
// GOAWAY's debug data, a wrapped error of another kind).
func TestMayHaveReachedUnusedConnection(t *testing.T) {
	t.Parallel()
	connected := &writeTrace{}
	connected.conns.Add(1)
	require.False(t, connected.mayHaveReached(true, errors.New("http2: client conn could not be established")))
	require.False(t, connected.mayHaveReached(false, errors.New("http2: client conn could not be established")))
	for _, text := range []string{
		"http2: client conn could not be established: debug=\"x\"",
		"read: http2: client conn could not be established",
		"http2: client conn is unusable",
	} {
		require.True(t, connected.mayHaveReached(true, errors.New(text)), text)
	}
	require.True(t, connected.mayHaveReached(true, fmt.Errorf("wrapped: %w", errors.New("http2: client conn could not be established"))))
}
