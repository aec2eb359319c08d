package maskonly

import (
	"context"
	"testing"
)

// A document is taken only for the key it was given for.
func TestLookupByKey(t *testing.T) {
	t.Parallel()
	ctx := With(context.Background(), "k1", []byte(`{"query":["v"]}`))
	if got, ok := Lookup(ctx, "k1"); !ok || string(got) != `{"query":["v"]}` {
		t.Errorf("Lookup(k1) = %q, %v", got, ok)
	}
	if _, ok := Lookup(ctx, "k2"); ok {
		t.Error("Lookup(k2) found the document of k1")
	}
	if _, ok := Lookup(context.Background(), "k1"); ok {
		t.Error("Lookup without a document found one")
	}
}
