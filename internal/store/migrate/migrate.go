// Package migrate reads the numbered SQL migrations a store embeds.
//
// Migration files are named NNN_description.sql. Both stores carry the same
// version numbers; a test in each store checks that they match.
//
// Allowed imports: the standard library only.
package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Progress is told, after each migration a store applies, how many of the
// pending migrations are applied (done of total) and the last one's name.
type Progress func(done, total int, name string)

// Report calls p, if set.
func (p Progress) Report(done, total int, name string) {
	if p != nil {
		p(done, total, name)
	}
}

// Load returns the migrations in dir of fsys, ordered by version.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNN_description.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: bad version number", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d", prev, name, v)
		}
		seen[v] = name
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Versions lists the versions of the migrations in dir of fsys, in order.
func Versions(fsys fs.FS, dir string) ([]int, error) {
	migs, err := Load(fsys, dir)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(migs))
	for i, m := range migs {
		out[i] = m.Version
	}
	return out, nil
}

// Newest returns the version of the newest migration in dir of fsys.
func Newest(fsys fs.FS, dir string) (int, error) {
	versions, err := Versions(fsys, dir)
	if err != nil {
		return 0, err
	}
	if len(versions) == 0 {
		return 0, fmt.Errorf("no migrations in %s", dir)
	}
	return versions[len(versions)-1], nil
}

// Pending returns the migrations of migs newer than version current, the
// schema version a store is at. A store at a version newer than every
// migration of migs was migrated by a newer release, whose schema this one
// does not know how to use: that is an error, not "up to date".
func Pending(migs []Migration, current int) ([]Migration, error) {
	if n := len(migs); n > 0 && current > migs[n-1].Version {
		return nil, Newer(current, migs[n-1].Version)
	}
	var out []Migration
	for _, m := range migs {
		if m.Version > current {
			out = append(out, m)
		}
	}
	return out, nil
}

// ErrNewer matches every refusal of a store whose schema a newer release
// has migrated (Newer): on open, and, from a process that was running
// when the newer release migrated the store, on each write it refuses
// from then on.
var ErrNewer = errors.New("the store's schema is newer than this opledger knows")

// Newer is the refusal of a store whose schema is at version current,
// newer than newest, the newest migration this release embeds. It
// matches ErrNewer. A current of 0 or less stands for a version that
// could not be read.
func Newer(current, newest int) error { return &newerError{current: current, newest: newest} }

// newerError is Newer's error.
type newerError struct{ current, newest int }

func (e *newerError) Error() string {
	at := "newer than"
	if e.current > 0 {
		at = fmt.Sprintf("at version %d, newer than", e.current)
	}
	return fmt.Sprintf("the store's schema is %s this opledger knows (%d): "+
		"a newer release migrated it; run that release or a later one", at, e.newest)
}

func (e *newerError) Is(target error) bool { return target == ErrNewer }
