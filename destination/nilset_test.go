package destination_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/destination"
)

// TestNewSetRefusesNil: a nil Destination in the list is refused with an
// error naming its place (NewSet used to panic on it).
func TestNewSetRefusesNil(t *testing.T) {
	t.Parallel()
	_, err := destination.NewSet(nil)
	require.EqualError(t, err, "destination 1 of 1 is nil")
	_, err = destination.NewSet(&stubDest{name: "a"}, nil)
	require.EqualError(t, err, "destination 2 of 2 is nil")
}
