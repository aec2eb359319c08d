package opledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestAnnounce: processes sharing a store see each other, and each
// setting in which another differs from them (the ledger's own options
// and the program's settings both announce); a setting only one of them
// announces is not compared; a process not seen for a minute is gone;
// Maintain announces, warns once of a process that differs, and removes
// its announcement when it ends. No setting's value is stored.
func TestAnnounce(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			clock := newManualClock()
			start := clock.Map(time.Time{})
			open := func(o opledger.Options) *opledger.Ledger {
				t.Helper()
				o.Clock = clock.Map
				l, err := opledger.Open(ctx, dsn, o)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, l.Close()) })
				return l
			}
			const secret = "rules: whsec-never-stored"
			payments := opledger.Options{Retention: 48 * time.Hour, DestinationsRequiringApproval: []string{"payments", "refunds"}}
			a := open(payments)
			b := open(opledger.Options{Retention: 24 * time.Hour})
			// The same list in another order, the same settings.
			c := open(opledger.Options{Retention: 48 * time.Hour, DestinationsRequiringApproval: []string{"refunds", "payments"}})
			announce := func(l *opledger.Ledger, settings map[string]string) []*opledger.Process {
				t.Helper()
				ps, err := l.Announce(ctx, opledger.AnnounceOptions{Settings: settings})
				require.NoError(t, err)
				return ps
			}
			byPID := func(ps []*opledger.Process) (self *opledger.Process, others []*opledger.Process) {
				for _, p := range ps {
					require.Equal(t, os.Getpid(), p.PID)
					require.NotEmpty(t, p.Host)
					if p.Self {
						require.Nil(t, self, "one self")
						self = p
					} else {
						others = append(others, p)
					}
				}
				require.NotNil(t, self)
				return self, others
			}

			ps := announce(a, map[string]string{"rules_file": secret})
			self, others := byPID(ps)
			require.Empty(t, others)
			require.Empty(t, self.OtherSettings)
			require.True(t, self.StartedAt.Equal(start))

			clock.Advance(time.Second)
			_, others = byPID(announce(b, map[string]string{"rules_file": secret, "only_b": "x"}))
			require.Len(t, others, 1)
			require.Equal(t, []string{"require_approval", "retention"}, others[0].OtherSettings, "a as b sees it")
			_, others = byPID(announce(c, map[string]string{"rules_file": "rules: other"}))
			require.Len(t, others, 2)
			require.Equal(t, []string{"require_approval", "retention", "rules_file"}, others[1].OtherSettings, "b as c sees it")
			require.Equal(t, []string{"rules_file"}, others[0].OtherSettings, "a as c sees it: the same options")

			// a reads them without announcing again: its last
			// announcement is what they are compared with.
			ps, err := a.Processes(ctx)
			require.NoError(t, err)
			self, others = byPID(ps)
			require.True(t, self.SeenAt.Equal(start), "a's announcement, a second ago")
			require.Len(t, others, 2)
			require.Equal(t, []string{"require_approval", "retention"}, others[0].OtherSettings, "b; only_b is b's alone")
			require.Equal(t, []string{"rules_file"}, others[1].OtherSettings, "c")

			// A minute and more without announcing: b and c are gone.
			clock.Advance(61 * time.Second)
			_, others = byPID(announce(a, map[string]string{"rules_file": secret}))
			require.Empty(t, others)

			if st.Name == "sqlite" {
				files, err := filepath.Glob(strings.TrimPrefix(dsn, "sqlite:") + "*")
				require.NoError(t, err)
				require.NotEmpty(t, files)
				for _, f := range files {
					data, err := os.ReadFile(f)
					require.NoError(t, err)
					require.False(t, bytes.Contains(data, []byte("whsec-never-stored")), "%s holds a setting's value", f)
				}
			}

			// Maintain: b announces at once, warns of a, and removes its
			// row when it ends.
			var logs testrig.LogBuffer
			maintained, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				b.Maintain(maintained, opledger.MaintainOptions{Settings: map[string]string{"rules_file": secret},
					Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			})
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "runs with other settings") },
				time.Minute, 10*time.Millisecond)
			stop()
			wg.Wait()
			var warning struct {
				Level    string   `json:"level"`
				Settings []string `json:"settings"`
				PID      int      `json:"process_pid"`
			}
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, "runs with other settings") {
					require.NoError(t, json.Unmarshal([]byte(line), &warning))
				}
			}
			require.Equal(t, "WARN", warning.Level)
			require.Equal(t, []string{"require_approval", "retention"}, warning.Settings)
			require.Equal(t, os.Getpid(), warning.PID)
			require.Equal(t, 1, strings.Count(logs.String(), "runs with other settings"), "once")
			ps, err = a.Processes(ctx)
			require.NoError(t, err)
			require.Len(t, ps, 1, "b removed its announcement")
			require.True(t, ps[0].Self)
		})
	}
}

// TestAnnounceDestinations: the settings about a destination are
// compared only between processes that both configure it, so processes
// of destinations of their own (proxies of different upstreams, a server
// beside them) are not told apart by them, while two that give one
// destination different policies are; a process limited to its own
// destinations (AnnounceOptions.Destinations, a proxy) is not compared on
// the settings that act on other destinations (retry_policy,
// require_approval, owners), and still is on retention.
func TestAnnounceDestinations(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			open := func(o opledger.Options, destinations ...string) *opledger.Ledger {
				t.Helper()
				l, err := opledger.Open(ctx, dsn, o)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, l.Close()) })
				_, err = l.Announce(ctx, opledger.AnnounceOptions{Destinations: destinations})
				require.NoError(t, err)
				return l
			}
			policy := func(attempts int) opledger.RetryPolicy {
				return opledger.RetryPolicy{MaxAttempts: attempts, InitialDelay: time.Second, MaxDelay: time.Minute}
			}
			server := open(opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{"crm": policy(3)},
				DestinationTenants:            map[string][]string{"crm": {"acme"}},
				DestinationsRequiringApproval: []string{"payments"}, DestinationOwners: map[string]string{"payments": "finance"}})
			proxyA := open(opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{"proxy:a": policy(2)}}, "proxy:a")
			proxyB := open(opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{"proxy:b": policy(2)},
				Retention: 48 * time.Hour}, "proxy:b")
			proxyA2 := open(opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{"proxy:a": policy(9)}}, "proxy:a")
			server2 := open(opledger.Options{DestinationRetryPolicies: map[string]opledger.RetryPolicy{"crm": policy(4)},
				DestinationTenants:            map[string][]string{"crm": {"acme", "beta"}},
				DestinationsRequiringApproval: []string{"payments"}, DestinationOwners: map[string]string{"payments": "finance"}})
			ids := map[string]string{}
			for name, l := range map[string]*opledger.Ledger{"server": server, "proxyA": proxyA, "proxyB": proxyB, "proxyA2": proxyA2, "server2": server2} {
				ps, err := l.Processes(ctx)
				require.NoError(t, err)
				for _, p := range ps {
					if p.Self {
						ids[p.ID] = name
					}
				}
			}
			require.Len(t, ids, 5)
			others := func(l *opledger.Ledger) map[string][]string {
				t.Helper()
				ps, err := l.Processes(ctx)
				require.NoError(t, err)
				out := map[string][]string{}
				for _, p := range ps {
					if !p.Self {
						out[ids[p.ID]] = p.OtherSettings
					}
				}
				return out
			}
			require.Equal(t, map[string][]string{
				"proxyA": {}, "proxyB": {"retention"}, "proxyA2": {},
				"server2": {"destination_retry_policies[crm]", "destination_tenants[crm]"},
			}, others(server), "the server sees the proxies on their own destinations, not on its approvals")
			require.Equal(t, map[string][]string{
				"server": {}, "proxyB": {"retention"}, "server2": {},
				"proxyA2": {"destination_retry_policies[proxy:a]"},
			}, others(proxyA), "two proxies of one upstream, with other policies")
		})
	}
}
