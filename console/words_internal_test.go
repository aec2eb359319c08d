package console

import "testing"

// TestConsoleWords: a message of the ledger the console did not foresee
// is shown in the console's words, its first letter capitalised whatever
// it is.
func TestConsoleWords(t *testing.T) {
	for in, want := range map[string]string{
		"mark_succeeded needs the destination_ref the operator found": "“Mark succeeded” needs the reference the operator found.",
		"authorize_retry is not allowed":                              "“Authorize retry” is not allowed.",
		"reason, operator or destination_ref too long":                "Reason, operator or reference too long.",
		"éa": "Éa.",
	} {
		if got := consoleWords(in); got != want {
			t.Errorf("consoleWords(%q) = %q, want %q", in, got, want)
		}
	}
}
