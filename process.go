package opledger

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/opledger/opledger/internal/store"
)

// Process is a process that maintains the ledger (Maintain, or Announce
// called by hand), as it last announced itself. Several processes that
// share a store must run with the same settings wherever these act on
// the whole ledger (retention, retry policies, the destinations that
// require approval, ...); a Process says which of its settings differ
// from this ledger's own.
type Process struct {
	// ID names the process's announcements; it is new at every start.
	ID string `json:"id"`
	// Host is the name of the machine it runs on (os.Hostname).
	Host string `json:"host"`
	// PID is its process id on that machine.
	PID int `json:"pid"`
	// StartedAt is its first announcement, SeenAt its latest.
	StartedAt time.Time `json:"started_at"`
	// SeenAt is its latest announcement: a process not seen for a minute
	// counts as gone.
	SeenAt time.Time `json:"seen_at"`
	// Self is true for this ledger's own process.
	Self bool `json:"self"`
	// OtherSettings names, in order, the settings this process runs with
	// otherwise than this ledger: those both announce, whose digests
	// differ. Empty for this ledger, and before its first announcement.
	OtherSettings []string `json:"other_settings"`
}

// AnnounceOptions are what a program adds to the ledger's own settings
// when it announces itself.
type AnnounceOptions struct {
	// Settings are the program's own settings that act on the whole
	// ledger, by name, such as the contents of a configuration file
	// every process must share. Only a digest of each is stored: a
	// value may be a file's text. The ledger's options that act on the
	// whole ledger are added by Announce itself (ledgerSettings), and
	// win over a name given here.
	Settings map[string]string
	// Destinations, when not empty, are the only destinations this
	// process records operations for, as a proxy's upstreams. Its
	// settings about other destinations act on nothing, so it announces
	// only those of its own destinations and the ones that act on every
	// operation whatever its destination (retention,
	// tombstone_retention, hold_review): it is not compared on
	// retry_policy, require_approval or owners. Empty: any destination,
	// every setting.
	Destinations []string
}

// Intervals of the announcements (Maintain).
const (
	// announceInterval is how often Maintain announces the process.
	announceInterval = 15 * time.Second
	// processGone is how long after its latest announcement a process
	// that did not remove its row (it was killed) counts as stopped.
	processGone = time.Minute
)

// self is what a ledger knows of its own process's announcements.
type self struct {
	mu      sync.Mutex
	id      string
	host    string
	started time.Time
	// settings are the digests last announced; nil before the first.
	settings map[string]string
	// differing are the settings of each other process that differed
	// at the last announcement, by process ID: a warning is logged when
	// a setting begins to differ, not at every announcement.
	differing map[string][]string
}

// Announce writes this process's row in the ledger's table of processes,
// with a digest of each setting that acts on the whole ledger, removes
// the rows of processes not seen for a minute (killed without removing
// theirs), and returns the processes now announced, this one included,
// each with the settings in which it differs from this one. Maintain
// calls it every 15 seconds, and removes the row when it ends; a program
// that maintains the ledger otherwise calls it itself.
//
// The settings the ledger adds are its Options that act on every
// operation whichever process recorded it: retry_policy, require_approval
// (DestinationsRequiringApproval), owners (DestinationOwners),
// hold_review, retention and tombstone_retention, and for each
// destination of DestinationRetryPolicies and DestinationTenants its
// entry, named destination_retry_policies[NAME] and
// destination_tenants[NAME]: as every setting, compared only when both
// processes announce it, so that processes that each configure
// destinations of their own (proxies of different upstreams) are not
// told apart by them. AnnounceOptions.Destinations narrows them.
func (l *Ledger) Announce(ctx context.Context, o AnnounceOptions) ([]*Process, error) {
	settings := digests(o.Settings, l.ledgerSettings(o.Destinations))
	me := &l.self
	me.mu.Lock()
	if me.id == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "unknown"
		}
		me.id, me.host = ulid.Make().String(), host
	}
	id, host, started := me.id, me.host, me.started
	me.mu.Unlock()
	var rows []*store.Process
	err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		if started.IsZero() {
			started = now
		}
		if _, err := tx.DeleteProcesses(ctx, "", now.Add(-processGone)); err != nil {
			return err
		}
		if err := tx.PutProcess(ctx, &store.Process{ID: id, Host: host, PID: os.Getpid(),
			StartedAt: started, SeenAt: now, Settings: settings}); err != nil {
			return err
		}
		rows, err = tx.ListProcesses(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("announce the process: %w", err)
	}
	me.mu.Lock()
	me.started, me.settings = started, settings
	me.mu.Unlock()
	return l.processes(rows), nil
}

// Processes returns the processes announced on the ledger (Announce), not
// gone, each with the settings in which it differs from this ledger's
// latest announcement (none before the first).
func (l *Ledger) Processes(ctx context.Context) ([]*Process, error) {
	var rows []*store.Process
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		now, err := l.now(ctx, r)
		if err != nil {
			return err
		}
		all, err := r.ListProcesses(ctx)
		rows = slices.DeleteFunc(all, func(p *store.Process) bool { return p.SeenAt.Before(now.Add(-processGone)) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the processes: %w", err)
	}
	return l.processes(rows), nil
}

// processes turns rows into Processes compared with this ledger's latest
// announcement.
func (l *Ledger) processes(rows []*store.Process) []*Process {
	me := &l.self
	me.mu.Lock()
	id, mine := me.id, me.settings
	me.mu.Unlock()
	out := make([]*Process, 0, len(rows))
	for _, r := range rows {
		p := &Process{ID: r.ID, Host: r.Host, PID: r.PID, StartedAt: r.StartedAt, SeenAt: r.SeenAt,
			Self: r.ID == id, OtherSettings: []string{}}
		if !p.Self && mine != nil {
			for _, name := range slices.Sorted(maps.Keys(r.Settings)) {
				if d, ok := mine[name]; ok && d != r.Settings[name] {
					p.OtherSettings = append(p.OtherSettings, name)
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// differingProcess is a process and settings of it that differ.
type differingProcess struct {
	*Process
	names []string
}

// newlyDiffering returns, of the processes of an announcement, in order,
// those with settings that differ now and did not at the announcement
// before, with those settings; it forgets the processes gone.
func (l *Ledger) newlyDiffering(ps []*Process) []differingProcess {
	me := &l.self
	me.mu.Lock()
	defer me.mu.Unlock()
	before := me.differing
	me.differing = map[string][]string{}
	var out []differingProcess
	for _, p := range ps {
		if len(p.OtherSettings) == 0 {
			continue
		}
		me.differing[p.ID] = p.OtherSettings
		var fresh []string
		for _, name := range p.OtherSettings {
			if !slices.Contains(before[p.ID], name) {
				fresh = append(fresh, name)
			}
		}
		if fresh != nil {
			out = append(out, differingProcess{p, fresh})
		}
	}
	return out
}

// unannounce removes this process's row, if it announced itself.
func (l *Ledger) unannounce(ctx context.Context) error {
	me := &l.self
	me.mu.Lock()
	id := me.id
	me.mu.Unlock()
	if id == "" {
		return nil
	}
	return l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.DeleteProcesses(ctx, id, time.Time{})
		return err
	})
}

// ledgerSettings are the ledger's options that act on the whole ledger,
// as text to digest: every process sharing the store must have the same.
// With destinations (AnnounceOptions.Destinations), only those that act
// on these destinations' operations.
func (s *shared) ledgerSettings(destinations []string) map[string]string {
	o := s.opts
	out := map[string]string{
		"hold_review":         o.HoldReviewAfter.String(),
		"retention":           o.Retention.String(),
		"tombstone_retention": o.TombstoneRetention.String(),
	}
	if len(destinations) == 0 {
		out["retry_policy"] = jsonText(o.RetryPolicy)
		out["require_approval"] = jsonText(slices.Compact(slices.Sorted(slices.Values(o.DestinationsRequiringApproval))))
		out["owners"] = jsonText(o.DestinationOwners)
	}
	mine := func(d string) bool { return len(destinations) == 0 || slices.Contains(destinations, d) }
	for d, p := range o.DestinationRetryPolicies {
		if mine(d) {
			out["destination_retry_policies["+d+"]"] = jsonText(p)
		}
	}
	for d, ts := range o.DestinationTenants {
		if mine(d) {
			out["destination_tenants["+d+"]"] = jsonText(slices.Sorted(slices.Values(ts)))
		}
	}
	return out
}

// jsonText is v as JSON (maps with their keys sorted), or the error's
// text: a value that cannot be encoded still gives a digest.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// digests returns a digest of each setting (payloadDigest: SHA-256 in
// hex), those of ledger winning over given ones of the same name.
func digests(given, ledger map[string]string) map[string]string {
	out := make(map[string]string, len(given)+len(ledger))
	for _, m := range []map[string]string{given, ledger} {
		for name, v := range m {
			out[name] = payloadDigest([]byte(v))
		}
	}
	return out
}
