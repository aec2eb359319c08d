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
		// A short key is replaced where it stands alone, not inside words.
		{"a", errors.New("claim a: lease lost"), "claim <key>: lease lost"},
		{"a", errors.New(`operation "a" failed`), `operation "<key>" failed`},
		{"17", errors.New("claim 17: retry 17 of 170 after 1.17s"), "claim <key>: retry <key> of 170 after 1.17s"},
		{"in", errors.New("key in is in progress"), "key <key> is <key> progress"},
		// The key's neighbours that are key characters but not letters or
		// digits are boundaries: the key goes.
		{"order:1", errors.New("update operation order:1: write conflict (order:1/x)"), "update operation <key>: write conflict (<key>/x)"},
		{"a.", errors.New("a.b, a.c"), "<key>b, <key>c"},
		{"wf:a/b", errors.New("workflow wf:a step b: wf:a/b held; wf:ab untouched"), "workflow <workflow> step b: <key> held; wf:ab untouched"},
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
