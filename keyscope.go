package opledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// KeyScope is what the operation keys of a destination are derived from,
// as the ledger recorded it (PinKeyScope). A program that derives its keys
// from settings, as the proxy derives them from its tenant and a digest of
// a credential header, records those settings, so that a start with other
// settings, under which every earlier request would get another key and be
// taken as new, is refused instead of forwarding repeats again.
type KeyScope struct {
	// Destination is the destination whose operation keys are derived
	// from Settings (PinKeyScope's destination).
	Destination string `json:"destination"`
	// Settings are the settings' values by name, stored in clear: header
	// names, a tenant, never a secret.
	Settings map[string]string `json:"settings"`
	// RecordedAt is when these settings were first recorded, or recorded
	// in place of others.
	RecordedAt time.Time `json:"recorded_at"`
}

// ErrKeyScopeChanged is matched by a KeyScopeChangedError.
var ErrKeyScopeChanged = errors.New("the settings a destination's operation keys are derived from have changed")

// KeyScopeChangedError is PinKeyScope's refusal of settings other than
// the recorded ones.
type KeyScopeChangedError struct {
	// Recorded is the scope in the ledger.
	Recorded *KeyScope
	// Settings are the settings given.
	Settings map[string]string
	// Changed names, sorted, the settings whose values differ, or that
	// one side has and the other has not.
	Changed []string
}

// Error names each changed setting with its recorded and its new value.
func (e *KeyScopeChangedError) Error() string {
	// PinKeyScope always sets Recorded; one a program made itself (a fake
	// of the ledger) may lack it.
	recorded := e.Recorded
	if recorded == nil {
		recorded = &KeyScope{}
	}
	parts := make([]string, len(e.Changed))
	for i, name := range e.Changed {
		parts[i] = fmt.Sprintf("%s %s, now %s", name, settingValue(recorded.Settings, name), settingValue(e.Settings, name))
	}
	msg := fmt.Sprintf("destination %s: its operation keys were derived with %s", recorded.Destination, strings.Join(parts, "; "))
	if recorded.RecordedAt.IsZero() {
		return msg
	}
	return msg + " (recorded " + recorded.RecordedAt.UTC().Format(time.RFC3339) + ")"
}

// Is matches ErrKeyScopeChanged.
func (e *KeyScopeChangedError) Is(target error) bool { return target == ErrKeyScopeChanged }

// settingValue quotes a setting's value, or says it is not set.
func settingValue(settings map[string]string, name string) string {
	v, ok := settings[name]
	if !ok {
		return "(not set)"
	}
	return fmt.Sprintf("%q", v)
}

// Bounds of the settings PinKeyScope takes.
const (
	maxKeyScopeSettings   = 32
	maxKeyScopeValueBytes = 1024
)

// PinKeyScope records the settings from which destination's operation
// keys are derived, the first time it is called for destination, and
// compares them on later calls: other settings are refused with a
// *KeyScopeChangedError (matching ErrKeyScopeChanged) and nothing is
// written, unless replace is true, which records them in place of the
// earlier ones and returns those. The record is store-wide, one per
// destination whatever the tenant: a program whose keys depend on its
// tenant names it among the settings, so that the same destination
// pinned from another tenant is a change too. Settings equal to the
// recorded ones write nothing.
//
// Setting names are 1 to 200 bytes; there are at most 32 settings, each
// value at most 1024 bytes. They are stored in clear: never pass a secret,
// pass what says where it comes from (a header's name, not its value).
func (l *Ledger) PinKeyScope(ctx context.Context, destination string, settings map[string]string, replace bool) (replaced *KeyScope, err error) {
	if err := checkDestinationName(destination); err != nil {
		return nil, err
	}
	if len(settings) > maxKeyScopeSettings {
		return nil, invalidInput("a key scope has at most %d settings, not %d", maxKeyScopeSettings, len(settings))
	}
	for name, v := range settings {
		switch {
		case name == "" || len(name) > maxNameLength:
			return nil, invalidInput("a key scope's setting names are 1 to %d bytes", maxNameLength)
		case len(v) > maxKeyScopeValueBytes:
			return nil, invalidInput("the key scope setting %q is %d bytes: at most %d", name, len(v), maxKeyScopeValueBytes)
		}
		// Stored as JSON, a name or value that is not text would not read
		// back as given.
		if err := checkText("a key scope's setting name", name); err != nil {
			return nil, err
		}
		if err := checkText(fmt.Sprintf("the key scope setting %q", name), v); err != nil {
			return nil, err
		}
	}
	settings = maps.Clone(settings)
	if settings == nil {
		settings = map[string]string{}
	}
	err = l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		replaced = nil
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		want := &store.KeyScope{Destination: destination, Settings: settings, RecordedAt: now}
		have, err := tx.GetKeyScope(ctx, destination)
		if errors.Is(err, store.ErrNotFound) {
			var inserted bool
			if inserted, err = tx.InsertKeyScope(ctx, want); err != nil || inserted {
				return err
			}
			// Another process recorded one since: compare with it.
			have, err = tx.GetKeyScope(ctx, destination)
		}
		if err != nil {
			return err
		}
		changed := changedSettings(have.Settings, settings)
		if len(changed) == 0 {
			return nil
		}
		recorded := &KeyScope{Destination: destination, Settings: have.Settings, RecordedAt: have.RecordedAt}
		if !replace {
			return &KeyScopeChangedError{Recorded: recorded, Settings: settings, Changed: changed}
		}
		replaced = recorded
		return tx.UpdateKeyScope(ctx, want)
	})
	if err != nil {
		return nil, err
	}
	return replaced, nil
}

// changedSettings names, sorted, the settings a and b do not share with
// the same value.
func changedSettings(a, b map[string]string) []string {
	var out []string
	for name, v := range a {
		if w, ok := b[name]; !ok || w != v {
			out = append(out, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
