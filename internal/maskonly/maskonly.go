// Package maskonly carries, from opledger's own packages to the ledger,
// content of a new operation that its payload does not hold but whose
// values must be masked as the payload's sensitive fields are: the proxy
// keeps a request's query whole and a body that is not canonical JSON
// only as a digest, yet an upstream may make its reference of a value of
// either. The ledger keeps such content with the operation for masking
// only (never shown, gone at compaction), as it keeps the content a
// revision replaced.
//
// It is a context value whose key no code outside this module can build,
// and it is taken only when the ledger records the key it was given for.
//
// Allowed imports: the standard library.
package maskonly

import "context"

type contextKey struct{}

// content is a JSON document and the key it was given for.
type content struct {
	key     string
	payload []byte
}

// With returns ctx carrying payload, a JSON document whose values at the
// new operation's sensitive fields are masked as the payload's are, for
// the operation key (payload must not be modified afterwards).
func With(ctx context.Context, key string, payload []byte) context.Context {
	return context.WithValue(ctx, contextKey{}, &content{key: key, payload: payload})
}

// Lookup returns the document ctx carries for key, if it carries one.
func Lookup(ctx context.Context, key string) ([]byte, bool) {
	c, _ := ctx.Value(contextKey{}).(*content)
	if c == nil || c.key != key || len(c.payload) == 0 {
		return nil, false
	}
	return c.payload, true
}
