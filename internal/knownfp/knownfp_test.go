package knownfp_test

import (
	"context"
	"testing"

	"github.com/opledger/opledger/internal/knownfp"
)

func TestLookupOnlyForTheSameIntent(t *testing.T) {
	ctx := knownfp.With(context.Background(), "a", "d", []byte(`{"x":1}`), 1, "sha256:f")
	if fp, ok := knownfp.Lookup(ctx, "a", "d", []byte(`{"x":1}`), 1); !ok || fp != "sha256:f" {
		t.Fatalf("same intent: got %q, %v", fp, ok)
	}
	for name, other := range map[string]struct {
		action, destination, payload string
		version                      int64
	}{
		"action":      {"b", "d", `{"x":1}`, 1},
		"destination": {"a", "e", `{"x":1}`, 1},
		"payload":     {"a", "d", `{"x":2}`, 1},
		"version":     {"a", "d", `{"x":1}`, 2},
	} {
		if fp, ok := knownfp.Lookup(ctx, other.action, other.destination, []byte(other.payload), other.version); ok {
			t.Errorf("another %s: got %q", name, fp)
		}
	}
	if _, ok := knownfp.Lookup(context.Background(), "a", "d", []byte(`{"x":1}`), 1); ok {
		t.Error("a context without one carries one")
	}
}
