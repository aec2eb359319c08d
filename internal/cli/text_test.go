package cli

import (
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/proxy"
)

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"failed to connect to `x`:\n\thost a: refused\n\thost b: refused":                                                                                          "failed to connect to `x`: host a: refused; host b: refused",
		"config c.yaml: yaml: unmarshal errors:\n  line 1: field bogus not found in type server.FileConfig\n  line 3: field x not found in type server.FileConfig": "config c.yaml: yaml: line 1: unknown field bogus; line 3: unknown field x",
		"a\r\nb\x1b[2J": `a; b\x1b[2J`,
		// A key with a space is the file's, said as written.
		"yaml: line 5: field time out not found in type destination.HTTPConfig":                                 `yaml: line 5: unknown field "time out"`,
		"yaml: unmarshal errors:\n  line 1: field my key not found in type server.FileConfig (did you mean x?)": `yaml: line 1: unknown field "my key" (did you mean x?)`,
	} {
		require.Equal(t, want, oneLine(in), "%q", in)
	}
}

func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"H42":             "H42",
		"a\nb\tc\rd":      `a\nb\tc\rd`,
		"\x1b[31mred\x7f": `\x1b[31mred\x7f`,
		"é\u2028\u0085ü":  `é\u2028\u0085ü`,
		// Bidi overrides and isolates would show "Mato" for "otaM".
		"\u202eotaM\u202c \u2067x\u2069\u200f": `\u202eotaM\u202c \u2067x\u2069\u200f`,
		"עברית":                                "עברית",
		// Bytes that are not UTF-8 are shown, not sent raw.
		"tok_\xff":        `tok_\xff`,
		"a\xc3\n\xe2\x82": `a\xc3\n\xe2\x82`,
	} {
		require.Equal(t, want, cell(in), "%q", in)
	}
}

// TestRedactedDSN: a SQLite path is shown as it is, spaces and '='
// included; what may hold a password is not.
func TestRedactedDSN(t *testing.T) {
	for in, want := range map[string]string{
		"sqlite:/srv/my ledger.db":                "sqlite:/srv/my ledger.db",
		"sqlite:a=b.db":                           "sqlite:a=b.db",
		"sqlite:host=db password=x":               "(given)",
		"postgres://u:pw@h/db":                    "postgres://u:xxxxx@h/db",
		"host=db user=u password=S3cret dbname=x": "(given)",
	} {
		require.Equal(t, want, redactedDSN(in, "(given)"), in)
	}
}

// TestNextDecisionOfFinishedOperations: a compacted operation offers no
// decision; a cancelled one says what an operator may still decide.
func TestNextDecisionOfFinishedOperations(t *testing.T) {
	failed := &opledger.Operation{State: opledger.StateFailed, FailureKind: opledger.FailureRejected, LastError: "400"}
	next, _ := nextDecision(failed, "", time.Time{})
	require.Equal(t, "the operator decides", next)
	failed.Tombstoned = true
	next, reason := nextDecision(failed, "", time.Time{})
	require.Equal(t, "none", next)
	require.Contains(t, reason, "compacted")
	next, reason = nextDecision(&opledger.Operation{State: opledger.StateFailed, FailureKind: opledger.FailureCancelled}, "", time.Time{})
	require.Equal(t, "none", next)
	require.Contains(t, reason, "authorize a retry")
}

// TestNextDecisionOfProxyOperations: a pending operation of the proxy is
// sent again only by its caller's repeat, never by a worker, so ops show
// says so and how to end one whose caller gave up; before, it said "a
// worker claims it, it is due now", and nothing ever did.
func TestNextDecisionOfProxyOperations(t *testing.T) {
	op := &opledger.Operation{Key: "proxy:crm:3f9a", Action: proxy.Action, Destination: "proxy:crm", State: opledger.StatePending}
	next, reason := nextDecision(op, " --db sqlite:proxy.db", time.Time{})
	require.Equal(t, "the caller's repeat", next)
	require.Contains(t, reason, "only when its caller repeats the request")
	require.Contains(t, reason, "opledger ops cancel proxy:crm:3f9a --reason TEXT --db sqlite:proxy.db")
	later := time.Now().Add(time.Hour)
	op.NotBefore = &later
	next, reason = nextDecision(op, "", time.Time{})
	require.Equal(t, "the caller's repeat", next)
	require.Contains(t, reason, "not before "+utc(later))

	// Any other operation is claimed by a worker, as before.
	op = &opledger.Operation{Key: "ord:1", Action: proxy.Action, Destination: "crm", State: opledger.StatePending}
	next, _ = nextDecision(op, "", time.Time{})
	require.Equal(t, "a worker claims it", next)
}

// TestAgain: the flags a suggested command repeats name the ledger as the
// command did, as one shell word each, never with a password or a token.
func TestAgain(t *testing.T) {
	flags := func(args ...string) *backendFlags {
		t.Helper()
		var bf backendFlags
		cmd := &cobra.Command{Use: "x"}
		bf.add(cmd)
		require.NoError(t, cmd.ParseFlags(args))
		return &bf
	}
	require.Empty(t, flags().again(), "the defaults")
	require.Equal(t, " --db sqlite:/tmp/a.db --tenant acme", flags("--db", "sqlite:/tmp/a.db", "--tenant", "acme").again())
	require.Equal(t, " --tenant acme", flags("--tenant", "acme").again())
	pg := flags("--db", "postgres://ops:s3cret@db:5432/ledger?sslmode=disable&search_path=x").again()
	require.Equal(t, " --db 'postgres://ops@db:5432/ledger?sslmode=disable&search_path=x'", pg)
	require.NotContains(t, pg, "s3cret")
	// The other secrets a URL carries are left out too, not masked (a
	// pasted "xxxxx" would be taken for the secret).
	pg = flags("--db", "postgres://ops@db/ledger?password=s3cret&sslmode=verify-full&sslkey=/k.pem&sslpassword=s3cret").again()
	require.Equal(t, " --db 'postgres://ops@db/ledger?sslmode=verify-full&sslkey=/k.pem'", pg)
	// One the URL cannot leave out (the keyword form pasted in) is named.
	require.Equal(t, " --db '<your --db>'", flags("--db", "postgres://ops@db/ledger?sslmode=require sslpassword=s3cret").again())
	require.Equal(t, " --server http://127.0.0.1:8080", flags("--server", "http://127.0.0.1:8080", "--token", "opl_secret").again())
	require.Equal(t, " --db 'sqlite:/tmp/it'\\''s.db'", flags("--db", "sqlite:/tmp/it's.db").again())
}
