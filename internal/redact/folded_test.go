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
