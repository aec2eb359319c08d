package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// eventsSource reads events from a store or a server.
type eventsSource interface {
	ListEvents(ctx context.Context, o opledger.EventListOptions) (*opledger.EventPage, error)
	GetEvent(ctx context.Context, source, eventID string) (*opledger.EventDetail, error)
	pageLister // the ledger's clock (ledgerNow)
}

func (f *backendFlags) openEvents(ctx context.Context) (eventsSource, func() error, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	if f.server != "" {
		b, err := f.open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return b.(serverBackend).c, b.Close, nil
	}
	l, err := openLedger(ctx, f.dsn, opledger.Options{Tenant: f.tenant, ExistingOnly: true}, stderrNote(f.cmd))
	if err != nil {
		return nil, nil, refusedInput(err)
	}
	return l, l.Close, nil
}

var _ eventsSource = (*client.Client)(nil)

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Inspect inbound events and their deliveries",
		Example: `  opledger events list --source stripe
  opledger events show stripe evt_1Q2w3E`,
	}
	var (
		bf             backendFlags
		source, status string
		cursor         string
		limit          int
		asJSON         bool
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List events, newest first",
		Example: `  opledger events list --status out_of_order
  opledger events list --server http://127.0.0.1:8080 --token $TOKEN --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --source "$UNSET" would list every source, --cursor "$UNSET"
			// the first page again and again.
			if err := nonEmptyFlags(cmd, "source", "status", "cursor"); err != nil {
				return err
			}
			if status != "" && !slices.Contains(eventStatuses, opledger.EventStatus(status)) {
				return usageError{fmt.Errorf("--status: unknown status %q (statuses: %s)", status, eventStatusNames())}
			}
			if err := checkLimit(limit, opledger.MaxListLimit); err != nil {
				return err
			}
			src, closeFn, err := bf.openEvents(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			page, err := src.ListEvents(cmd.Context(), opledger.EventListOptions{Source: source, Status: opledger.EventStatus(status), Limit: limit, Cursor: cursor})
			if err != nil {
				return refusedInput(err)
			}
			if asJSON {
				err = writeJSONLines(cmd.OutOrStdout(), page.Items)
			} else {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "SOURCE\tEVENT\tTYPE\tSTATUS\tOPERATIONS\tRECEIVED")
				for _, e := range page.Items {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", cell(e.Source), cell(e.EventID), cell(e.Type), cell(string(e.Status)), len(e.OperationKeys), utc(e.ReceivedAt))
				}
				err = tw.Flush()
			}
			if err != nil {
				return err
			}
			if err := noteEmptyList(cmd, len(page.Items) == 0, cursor, "events",
				bf.emptyTenantNote("event", ""), func() (bool, error) {
					some, err := src.ListEvents(cmd.Context(), opledger.EventListOptions{Limit: 1})
					return err == nil && len(some.Items) > 0, err
				}, "source", "status"); err != nil {
				return err
			}
			return morePages(cmd, page.NextCursor)
		},
	}
	bf.add(list)
	list.Flags().StringVar(&source, "source", "", "only this source")
	list.Flags().StringVar(&status, "status", "", "only this status: applied, out_of_order, conflict or unmapped")
	addLimitFlag(list, &limit, 100, opledger.MaxListLimit)
	list.Flags().StringVar(&cursor, "cursor", "", cursorUsage)
	list.Flags().BoolVar(&asJSON, "json", false, "JSON lines for scripts")

	var (
		sbf      backendFlags
		showJSON bool
	)
	show := &cobra.Command{
		Use:   "show SOURCE EVENT_ID",
		Short: "Show an event, every delivery of it, and the operations it produced",
		Example: `  opledger events show forms evt-1
  opledger events show forms evt-1 --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError{fmt.Errorf("give the source and the event id")}
			}
			// Which of the two is wrong, and why, as the client and the
			// ledger say it, but as a usage error (exit 2) before any
			// store or server is asked.
			for i, what := range []string{"event source", "event id"} {
				if args[i] == "" {
					return usageError{fmt.Errorf("%s is empty", what)}
				}
				if err := opledger.ValidateKey(args[i]); err != nil {
					return usageError{fmt.Errorf("%s is not in the key syntax: %s", what, strings.TrimPrefix(err.Error(), "invalid key: "))}
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			src, closeFn, err := sbf.openEvents(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			d, err := src.GetEvent(cmd.Context(), args[0], args[1])
			if errors.Is(err, opledger.ErrNotFound) {
				where := ""
				if sbf.server == "" {
					where = fmt.Sprintf(" in tenant %q", sbf.tenant)
				}
				return fmt.Errorf("event %s/%s not found%s", args[0], args[1], where)
			}
			if err != nil {
				return refusedInput(err)
			}
			if showJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(d) // masks the operations' sensitive fields, as the API does
			}
			var now time.Time
			if len(d.Operations) > 0 {
				now = ledgerNow(cmd.Context(), src) // their AGE
			}
			return writeEvent(cmd.OutOrStdout(), d, now)
		},
	}
	sbf.add(show)
	show.Flags().BoolVar(&showJSON, "json", false, "one JSON document, as GET /v1/events/{source}/{event_id} gives it")
	cmd.AddCommand(list, show)
	return cmd
}

// eventStatuses are the statuses --status takes.
var eventStatuses = []opledger.EventStatus{opledger.EventApplied, opledger.EventOutOfOrder, opledger.EventConflict, opledger.EventUnmapped}

func eventStatusNames() string {
	var out []string
	for _, s := range eventStatuses {
		out = append(out, string(s))
	}
	return strings.Join(out, ", ")
}

// writeEvent prints events show's text; its operations' AGE is measured
// against now (writeOpsTable).
func writeEvent(w io.Writer, d *opledger.EventDetail, now time.Time) error {
	e := d.Event
	fmt.Fprintf(w, "%s/%s  %s  %s\n", cell(e.Source), cell(e.EventID), cell(e.Type), cell(string(e.Status)))
	if e.OutOfOrder {
		fmt.Fprintln(w, "  OUT OF ORDER: recorded, not applied over a newer event")
	}
	if e.Reason != "" {
		fmt.Fprintf(w, "  %s\n", cell(e.Reason))
	}
	fmt.Fprintf(w, "\nDeliveries (%d):\n", len(d.Deliveries))
	for _, dl := range d.Deliveries {
		dup := "first"
		if dl.Duplicate {
			dup = "duplicate"
		}
		if dl.PayloadDiffers {
			dup += ", payload differs from the first delivery's"
		}
		fmt.Fprintf(w, "  %s  %s  %s\n", dl.ReceivedAt.UTC().Format(time.RFC3339Nano), cell(dash(dl.DeliveryID)), dup)
	}
	fmt.Fprintf(w, "\nOperations (%d):\n", len(d.Operations))
	return writeOpsTable(w, d.Operations, now)
}
