package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// Stats reads the tenant's figures from the ledger itself, as GET
// /v1/stats gives them, or, allTenants, every tenant's together, as
// /metrics does.
func (b ledgerBackend) Stats(ctx context.Context, allTenants bool) (*client.Stats, error) {
	st, err := b.l.Stats(ctx, allTenants)
	if err != nil {
		return nil, err
	}
	ev, err := b.l.EventStats(ctx, allTenants)
	if err != nil {
		return nil, err
	}
	return &client.Stats{Stats: *st, Events: *ev}, nil
}

// Stats reads the token's tenant's figures; a server gives no other
// tenant's (the command refuses --all-tenants with --server first).
func (b serverBackend) Stats(ctx context.Context, allTenants bool) (*client.Stats, error) {
	if allTenants {
		return nil, errAllTenantsServer
	}
	return b.c.Stats(ctx)
}

// errAllTenantsServer refuses --all-tenants with --server.
var errAllTenantsServer = usageError{errors.New("--all-tenants reads the store itself (--db): a server answers for its token's tenant only (its /metrics counts every tenant)")}

func newOpsStatsCmd() *cobra.Command {
	var (
		bf         backendFlags
		asJSON     bool
		allTenants bool
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the tenant's figures: operations by state, waits, attempts, effects, recoveries, events",
		Long: `stats prints the figures the console's dashboard and GET /v1/stats give, each
answering its own question, none derived from another: operations by state; the
unresolved ones (uncertain and held) and the held ones past their review time;
how long the due operation waiting longest for a worker, and the operation
waiting longest for an approval, have waited; technical attempts by destination
and outcome; confirmed and duplicate effects; operator recoveries; and inbound
events and their deliveries. --json prints the object GET /v1/stats answers.
--all-tenants, with --db, counts every tenant of the ledger together, as
/metrics does.`,
		Example: `  opledger ops stats --db sqlite:opledger.db --tenant acme
  opledger ops stats --db 'postgres://opledger@db/ledger' --all-tenants
  opledger ops stats --server http://127.0.0.1:8080 --token $TOKEN --json | jq .oldest_approval_wait_seconds`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if allTenants && bf.server != "" {
				return errAllTenantsServer
			}
			if allTenants && cmd.Flags().Changed("tenant") {
				return usageError{errors.New("--all-tenants counts every tenant: leave out --tenant")}
			}
			b, err := bf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			st, err := b.Stats(cmd.Context(), allTenants)
			if err != nil {
				return err
			}
			if asJSON {
				err = writeJSONLines(cmd.OutOrStdout(), []*client.Stats{st})
			} else {
				err = writeStats(cmd.OutOrStdout(), st)
			}
			if err != nil || allTenants {
				return err
			}
			// All 0 in the wrong tenant would read as a quiet ledger, as
			// an empty list would: --tenant defaults to "default".
			if statsEmpty(st) {
				_, err = fmt.Fprintln(cmd.ErrOrStderr(), "note: "+bf.emptyTenantNote("operation or event", "its figures are all 0"))
			}
			return err
		},
	}
	bf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "the object GET /v1/stats answers, on one line")
	cmd.Flags().BoolVar(&allTenants, "all-tenants", false, "with --db: every tenant's figures together, as /metrics counts them")
	return cmd
}

// statsEmpty reports whether the figures count no operation (in any
// state, compacted ones too) and no event.
func statsEmpty(st *client.Stats) bool {
	for _, n := range st.OperationsByState {
		if n > 0 {
			return false
		}
	}
	return st.Events.Events == 0
}

// writeStats writes the figures as a list of named values.
func writeStats(w io.Writer, st *client.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Operations by state:")
	for _, s := range opledger.States {
		fmt.Fprintf(tw, "  %s\t%d\n", s, st.OperationsByState[s])
	}
	fmt.Fprintf(tw, "Unresolved (uncertain + held):\t%d\n", st.Unresolved)
	fmt.Fprintf(tw, "Held past their review time:\t%d\n", st.ReviewsOverdue)
	// Pending operations that all wait for their retry time have no
	// wait (oldest_due_seconds is 0 when none is due): a wait of 0s
	// would read as one due right now.
	worker := statsWait(st.OldestDueSeconds, st.OperationsByState[opledger.StatePending], "none pending")
	if st.OperationsByState[opledger.StatePending] > 0 && st.OldestDueSeconds == 0 {
		worker = "- (none due)"
	}
	fmt.Fprintf(tw, "Longest wait for a worker:\t%s\n", worker)
	fmt.Fprintf(tw, "Longest wait for an approval:\t%s\n",
		statsWait(st.OldestApprovalWaitSeconds, st.OperationsByState[opledger.StateAwaitingApproval], "none awaits"))
	stuck := fmt.Sprint(st.StuckWorkflows)
	if st.StuckWorkflows > 0 {
		stuck += " (workflows list --stuck names them)"
	}
	fmt.Fprintf(tw, "Workflows that cannot go on:\t%s\n", stuck)
	fmt.Fprintf(tw, "Technical attempts:\t%d\n", st.AttemptsTotal)
	for _, a := range st.Attempts {
		fmt.Fprintf(tw, "  %s, %s\t%d\n", cell(a.Destination), a.Outcome, a.Count)
	}
	fmt.Fprintf(tw, "Confirmed effects:\t%d\n", st.ConfirmedEffects)
	fmt.Fprintf(tw, "Duplicate effects detected:\t%d\n", st.DuplicateEffects)
	recoveries := fmt.Sprint(st.Recoveries)
	if st.Recoveries > 0 {
		recoveries += fmt.Sprintf(" (mean %s, p90 %s)", statsDuration(st.RecoveryMeanSeconds), statsDuration(st.RecoveryP90Seconds))
	}
	fmt.Fprintf(tw, "Operator recoveries:\t%s\n", recoveries)
	fmt.Fprintf(tw, "Events received:\t%d\n", st.Events.Events)
	for _, s := range []opledger.EventStatus{opledger.EventApplied, opledger.EventOutOfOrder, opledger.EventConflict, opledger.EventUnmapped} {
		fmt.Fprintf(tw, "  %s\t%d\n", s, st.Events.EventsByStatus[s])
	}
	fmt.Fprintf(tw, "Events kept (not yet forgotten by retention):\t%d\n", st.Events.Kept)
	fmt.Fprintf(tw, "Deliveries:\t%d (%d duplicate)\n", st.Events.Deliveries, st.Events.DuplicateDeliveries)
	return tw.Flush()
}

// statsWait writes the wait in seconds of the longest waiting of count
// operations, or none when there are none to wait.
func statsWait(seconds float64, count int, none string) string {
	if count == 0 {
		return "- (" + none + ")"
	}
	return statsDuration(seconds)
}

// statsDuration writes seconds to the second.
func statsDuration(seconds float64) string {
	return max(time.Duration(seconds*float64(time.Second)).Round(time.Second), 0).String()
}
