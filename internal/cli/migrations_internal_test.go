package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// logMigrations logs each migration of an upgrade at INFO, and a new
// ledger's creation in one INFO line.
func TestLogMigrations(t *testing.T) {
	t.Parallel()
	lines := func(calls ...func(func(int, int, string))) []string {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		progress := logMigrations(log)
		for _, call := range calls {
			call(progress)
		}
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}
	step := func(done, total int, name string) func(func(int, int, string)) {
		return func(p func(int, int, string)) { p(done, total, name) }
	}

	require.Equal(t, []string{`level=INFO msg="created the ledger's schema" migrations=3`},
		lines(step(1, 3, "001_init.sql"), step(2, 3, "002_x.sql"), step(3, 3, "003_y.sql")))
	require.Equal(t, []string{
		`level=INFO msg="migrating the ledger's schema" migration=018_x.sql done=1 of=2`,
		`level=INFO msg="migrating the ledger's schema" migration=019_y.sql done=2 of=2`,
	}, lines(step(1, 2, "018_x.sql"), step(2, 2, "019_y.sql")))
}
