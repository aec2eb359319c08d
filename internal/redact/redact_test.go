package redact

import (
	"errors"
	"testing"
)

// TestKeys: an operation key leaves an error whole; a workflow step's key
// takes its workflow's key with it, so the other steps' keys go too.
func TestKeys(t *testing.T) {
	t.Parallel()
	plain := errors.New("claim intake:I17:create: in progress")
	for _, tc := range []struct {
		key  string
		err  error
		want string
	}{
		{"intake:I17:create", plain, "claim <key>: in progress"},
		{"wf:ada/create", errors.New("workflow wf:ada step notify: wf:ada/notify is held; after wf:ada/create"),
			"workflow <workflow> step notify: <workflow>/notify is held; after <key>"},
		{"other", plain, plain.Error()},
	} {
		if got := Keys(tc.key, tc.err); got.Error() != tc.want {
			t.Errorf("Keys(%q, %q) = %q, want %q", tc.key, tc.err, got, tc.want)
		}
	}
	if Keys("other", plain) != plain {
		t.Error("an error without the key is returned as it is")
	}
	if Keys("k", nil) != nil {
		t.Error("nil stays nil")
	}
}
