package opledger_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key  string
		ok   bool
		hint string
	}{
		{"intake:I17:create", true, ""},
		{"A", true, ""},
		{"wf-1/step.2_x", true, ""},
		{strings.Repeat("a", 200), true, ""},
		{strings.Repeat("a", 201), false, "longer than 200"},
		{"", false, "empty"},
		{"-start", false, "start with a letter or digit"},
		{":start", false, "start with a letter or digit"},
		{"ana@example.com", false, "personal data"},
		{"order 17", false, "(byte 6, ' ', is not one of them)"},
		{"ordér", false, "(byte 4, 'é', is not one of them)"},
		{"a\nb", false, `(byte 2, '\n', is not one of them)`},
		{"a\xffb", false, `(byte 2, '�', is not one of them)`},
	}
	for _, tc := range cases {
		err := opledger.ValidateKey(tc.key)
		if tc.ok {
			require.NoError(t, err, tc.key)
			continue
		}
		require.ErrorIs(t, err, opledger.ErrInvalidKey, tc.key)
		require.ErrorContains(t, err, tc.hint)
		if len(tc.key) > 3 {
			require.NotContains(t, err.Error(), tc.key, "the refused key is never echoed")
		}
	}
}

// FuzzValidateKey checks that validation never panics and agrees with the
// documented regular expression.
func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"intake:I17:create", "", "a@b", "-x", strings.Repeat("z", 201), "a/b.c_d-e:f", "\x00", "ñ"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := opledger.ValidateKey(key)
		want := keyPattern.MatchString(key) && !strings.Contains(key, "@")
		if want != (err == nil) {
			t.Fatalf("ValidateKey(%q) = %v, pattern says valid=%v", key, err, want)
		}
		if err != nil && !errors.Is(err, opledger.ErrInvalidKey) {
			t.Fatalf("error %v does not match ErrInvalidKey", err)
		}
	})
}

func TestDestinationIdempotencyKey(t *testing.T) {
	t.Parallel()
	k := opledger.DestinationIdempotencyKey("acme", "intake:I17:create", 1)
	require.Equal(t, k, opledger.DestinationIdempotencyKey("acme", "intake:I17:create", 1), "stable")
	require.Regexp(t, `^opl-[0-9a-f]{40}$`, k)
	require.NotEqual(t, k, opledger.DestinationIdempotencyKey("acme", "intake:I17:create", 2), "per version")
	require.NotEqual(t, k, opledger.DestinationIdempotencyKey("other", "intake:I17:create", 1), "per tenant")
	// The separator keeps tenant and key apart.
	require.NotEqual(t, opledger.DestinationIdempotencyKey("ab", "c", 1), opledger.DestinationIdempotencyKey("a", "bc", 1))
}
