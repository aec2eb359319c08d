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
	require.NoError(t, writeShow(&buf, d, decisionRecord(d, "", false)))
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

// ops show prints every time in UTC, marked Z, whatever location the
// times came in (a server's answer with an offset, a ledger's Clock):
// the state's since, the timeline and attempts did, but the replay
// decision record's last step, retry time, lease and review time, and a
// compacted operation's recorded and finished times, printed the time as
// it came, with its offset, beside UTC ones. An attempt's times carry
// their date, as the timeline's do: one claimed days ago is not today's.
func TestShowTimesInUTC(t *testing.T) {
	t.Parallel()
	ist := time.FixedZone("IST", 5*3600+1800)
	at := time.Date(2026, 12, 4, 15, 30, 0, 0, ist) // 10:00 UTC
	later := time.Date(2099, 1, 2, 5, 30, 0, 0, ist)
	at1 := at.Add(24 * time.Hour)
	show := func(op *opledger.Operation) string {
		op.Key, op.Payload, op.StateSince, op.CreatedAt, op.UpdatedAt = "k1", json.RawMessage(`{}`), at, at, at
		d := &opsDetail{Operation: op,
			Attempts: []*opledger.Attempt{{Number: 1, ID: "a1", Worker: "w", ClaimedAt: at, DispatchedAt: &at}},
			Timeline: []*opledger.TimelineEntry{{At: at, Actor: "api", Event: "recorded", To: opledger.StatePending}}}
		var buf bytes.Buffer
		require.NoError(t, writeShow(&buf, d, decisionRecord(d, "", false)))
		out := buf.String()
		require.NotContains(t, out, "+05:30", out)
		require.NotContains(t, out, "15:30", out)
		return out
	}
	out := show(&opledger.Operation{State: opledger.StateHeld, Owner: "ops", ReviewBy: &at1})
	require.Contains(t, out, "held since 2026-12-04T10:00:00Z")
	require.Contains(t, out, "last confirmed step:    recorded at 2026-12-04T10:00:00Z")
	require.Contains(t, out, "ops decides by 2026-12-05T10:00:00Z")
	require.Contains(t, out, "  1  -        a1  w       2026-12-04 10:00:00.000Z  2026-12-04 10:00:00.000Z")
	out = show(&opledger.Operation{State: opledger.StatePending, NotBefore: &later})
	require.Contains(t, out, "retry scheduled, not before 2099-01-02T00:00:00Z")
	out = show(&opledger.Operation{State: opledger.StateInProgress, LeaseExpiresAt: &at1})
	require.Contains(t, out, "it holds the lease until 2026-12-05T10:00:00Z")
	out = show(&opledger.Operation{State: opledger.StateSucceeded, Tombstoned: true})
	require.Contains(t, out, "recorded 2026-12-04T10:00:00Z, finished 2026-12-04T10:00:00Z")
}
