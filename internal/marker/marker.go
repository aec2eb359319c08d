// Package marker holds the fixed phrases that one part of opledger writes
// into stored text and another part reads back to decide: that a
// destination said a record exists (the reconciler then trusts no lookup
// that cannot see it), and that a lookup failed (the reconciler counts
// them). The ledger never masks inside these phrases when it scrubs
// sensitive values from stored text, so a sensitive value that happens to
// be part of one ("ready" in "already") cannot change what the reader
// decides.
//
// Allowed imports: the standard library.
package marker

import (
	"errors"
	"strings"
)

// Exists is the text of destination.ErrExists, carried in an uncertain
// report's error.
const Exists = "the destination reports that the record already exists"

// LookupFailed starts the evidence of a reconciliation deferred after a
// failed lookup; only a deferral whose reason starts with it is counted
// as one (Ledger.LookupFailures).
const LookupFailed = "lookup failed: "

// Phrases are all the markers.
var Phrases = []string{Exists, LookupFailed}

// ErrExists is destination.ErrExists (the same value), here so that the
// ledger, which cannot import destination, matches it too.
var ErrExists = errors.New(Exists)

// ExistsFirst returns text, the text of err, led by Exists when err
// matches ErrExists: the reconciler finds the mark in the stored text,
// which is cut to its first 1000 bytes, and an error that matches
// ErrExists through its Is method may word its own text otherwise.
func ExistsFirst(err error, text string) string {
	if !errors.Is(err, ErrExists) || strings.HasPrefix(text, Exists) {
		return text
	}
	return Exists + ": " + strings.Replace(text, ": "+Exists, "", 1)
}
