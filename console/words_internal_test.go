package console

import "testing"

// TestConsoleWords: a message of the ledger the console did not foresee
// is shown in the console's words, its first letter capitalised whatever
// it is.
func TestConsoleWords(t *testing.T) {
	for in, want := range map[string]string{
		"mark_succeeded needs the destination_ref the operator found": "“Mark succeeded” needs the reference the operator found.",
		"authorize_retry is not allowed":                              "“Authorize retry” is not allowed.",
		"destination_ref is 300 bytes long; at most 200 are allowed":  "Reference is 300 bytes long; at most 200 are allowed.",
		"éa": "Éa.",
	} {
		if got := consoleWords(in); got != want {
			t.Errorf("consoleWords(%q) = %q, want %q", in, got, want)
		}
	}
}
