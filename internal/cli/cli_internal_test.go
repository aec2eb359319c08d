package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
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

// ops show lines the timeline's events up after the longest actor.
func TestShowTimelineColumns(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	d := &opsDetail{
		Operation: &opledger.Operation{Key: "k1", State: opledger.StateSucceeded, Payload: json.RawMessage(`{}`)},
		Timeline: []*opledger.TimelineEntry{
			{At: at, Actor: "api", Event: "recorded", To: opledger.StatePending},
			{At: at, Actor: "maria (command line on ops-host)", Event: "operator marked succeeded", From: opledger.StateHeld, To: opledger.StateSucceeded},
			{At: at, Actor: "executor/1", Event: "claimed"},
		},
	}
	var buf bytes.Buffer
	require.NoError(t, writeShow(&buf, d, decisionRecord(d, "")))
	var columns []int
	for _, event := range []string{"recorded", "operator marked succeeded", "claimed"} {
		for line := range strings.SplitSeq(buf.String(), "\n") {
			if strings.HasPrefix(line, "  2026-12-04 10:00:00.000Z  ") && strings.Contains(line, " "+event) {
				columns = append(columns, strings.Index(line, " "+event))
			}
		}
	}
	require.Len(t, columns, 3, buf.String())
	require.Equal(t, []int{columns[0], columns[0], columns[0]}, columns, buf.String())
	require.Equal(t, len("  2026-12-04 10:00:00.000Z  maria (command line on ops-host)"), columns[0])
}

func TestShortened(t *testing.T) {
	require.Equal(t, "abc", shortened("abc", 3))
	require.Equal(t, "ab… (4 bytes; --json gives it all)", shortened("abcd", 2))
	// Never inside a character: "é" is two bytes.
	require.Equal(t, "a… (5 bytes; --json gives it all)", shortened("aéé", 2))
}
