package redact

import "testing"

// TestSecretsFoldedAsSecrets checks that masking with secrets folded once
// gives what Secrets gives: any case, Unicode folds, empty secrets,
// secrets side by side and overlapping, none found.
func TestSecretsFoldedAsSecrets(t *testing.T) {
	t.Parallel()
	secrets := []string{"", "tok_SECRET", "secret", "Kelvin", "ſtraße", "ab"}
	for _, s := range []string{
		"", "nothing here", "Bearer tok_secret", "TOK_SECRETtok_secret", "a KELVIN and a \u212Aelvin",
		"STRASSE ſtraße ſTRAßE", "abab-ab", "secretsecret", "tok_secre", "\xff tok_Secret \xfe",
	} {
		want := Secrets(s, secrets, "***")
		if got := SecretsFolded(s, Folds(secrets), "***"); got != want {
			t.Errorf("SecretsFolded(%q) = %q, Secrets %q", s, got, want)
		}
	}
}

// TestFoldsAllocations checks that folding secrets costs a fixed number
// of allocations, not several for each secret (Folds is built for every
// answer the proxy saves), and that a secret whose first character
// folds with three others (U+0345, ι, Ι, ι) still finds each.
func TestFoldsAllocations(t *testing.T) {
	secrets := []string{"tok_SECRET_of_account_A", "/records", "records", "\u0345abc", "lower-case-only"}
	if n := testing.AllocsPerRun(100, func() { _ = Folds(secrets) }); n > 3 {
		t.Errorf("Folds of %d secrets: %v allocations, want at most 3", len(secrets), n)
	}
	for _, s := range []string{"\u0345ABC", "\u03b9abc", "\u0399Abc", "\u1fbeabc"} {
		if got := SecretsFolded(s, Folds(secrets), "***"); got != "***" {
			t.Errorf("SecretsFolded(%q) = %q", s, got)
		}
	}
}
