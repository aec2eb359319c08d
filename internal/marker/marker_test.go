package marker_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/opledger/opledger/internal/marker"
)

type taken struct{}

func (taken) Error() string        { return "409 external_ref taken" }
func (taken) Is(target error) bool { return target == marker.ErrExists }

func TestExistsFirst(t *testing.T) {
	for _, tc := range []struct {
		err  error
		text string
		want string
	}{
		{errors.New("timeout"), "timeout", "timeout"},
		{taken{}, "409 external_ref taken", marker.Exists + ": 409 external_ref taken"},
		{fmt.Errorf("POST: 409 Conflict: %w", marker.ErrExists), "POST: 409 Conflict: " + marker.Exists, marker.Exists + ": POST: 409 Conflict"},
		{marker.ErrExists, marker.Exists, marker.Exists},
	} {
		if got := marker.ExistsFirst(tc.err, tc.text); got != tc.want {
			t.Errorf("ExistsFirst(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}
