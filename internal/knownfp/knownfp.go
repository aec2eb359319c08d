// Package knownfp carries, from opledger's own packages to the ledger, the
// fingerprint of an intent already computed with opledger.Fingerprint, so
// that a claim does not canonicalize the same payload a second time. The
// proxy computes it to learn whether a request's JSON body can be kept in
// the payload (a body the fingerprint cannot canonicalize is left out);
// the ledger's Claim then takes it instead of computing it again.
//
// It is a context value whose key no code outside this module can build,
// and it is taken only for an intent of the same action, destination,
// payload (byte for byte) and version as the fingerprint was computed
// from: a fingerprint is a function of those four alone, so a value
// taken is the value the ledger would have computed.
//
// Allowed imports: the standard library.
package knownfp

import (
	"bytes"
	"context"
)

type contextKey struct{}

// known is a fingerprint and what it was computed from.
type known struct {
	action, destination string
	payload             []byte
	version             int64
	fingerprint         string
}

// With returns ctx carrying fingerprint, which opledger.Fingerprint
// returned for action, destination, payload and version (payload must not
// be modified afterwards).
func With(ctx context.Context, action, destination string, payload []byte, version int64, fingerprint string) context.Context {
	return context.WithValue(ctx, contextKey{}, &known{action: action, destination: destination,
		payload: payload, version: version, fingerprint: fingerprint})
}

// Lookup returns the fingerprint ctx carries for exactly action,
// destination, payload and version, if it carries one.
func Lookup(ctx context.Context, action, destination string, payload []byte, version int64) (string, bool) {
	k, _ := ctx.Value(contextKey{}).(*known)
	if k == nil || k.action != action || k.destination != destination || k.version != version || !bytes.Equal(k.payload, payload) {
		return "", false
	}
	return k.fingerprint, true
}
