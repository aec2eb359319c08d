package webhook_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/webhook"
)

// TestSecretEnvOfSeparatorsOnly: a variable that holds only commas and
// spaces (a rotation list whose secrets were all removed) is refused
// naming the variable, as an empty one is. It said "webhook config: no
// secret", which names neither the variable nor what is wrong with it.
func TestSecretEnvOfSeparatorsOnly(t *testing.T) {
	t.Setenv("OPLEDGER_TEST_WEBHOOK_COMMAS", " , ,")
	_, err := webhook.New(webhook.Config{Scheme: webhook.SchemeStripe, SecretEnv: "OPLEDGER_TEST_WEBHOOK_COMMAS"})
	require.EqualError(t, err, "webhook config: environment variable OPLEDGER_TEST_WEBHOOK_COMMAS holds no secret, only commas and spaces")
}
