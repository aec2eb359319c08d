// Package cli is the opledger command tree (cobra). cmd/opledger only calls
// Main, so every command is testable in-process and from the built binary.
//
// Exit codes: 0 success, 1 a command failed, 2 usage error.
//
// Allowed imports: opledger and its public packages, cobra and its pflag
// (the values a flag refused), internal/bench (opledger bench),
// internal/redact, the stores' read-only HoldsLedger checks
// (internal/store/sqlitestore, internal/store/pgstore), and pgxpool's
// ParseConfig (the parser of the PostgreSQL store's DSN), go-isatty and
// progressbar (opledger bench's progress on a terminal).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Version is the opledger version, set at build time with
// -ldflags "-X github.com/opledger/opledger/internal/cli.Version=v1.2.3".
var Version = "dev"

// version is Version when the build set it, otherwise the version the
// go command stamped: the module's (go install …@v1.2.3), or, for a build
// from a checkout with -buildvcs, a pseudo-version naming its commit
// (+dirty when the tree had changes); "dev" when there is none.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return Version
}

// usageError marks errors that are the caller's wrong use of a command.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// flagError is the usage error of a flag value pflag could not take: what
// the flag takes and the value given (--limit takes a whole number from 1
// to 500 (got "x")), rather than strconv's words. Other errors of flags
// (an unknown flag, one without its value) are pflag's own. A command
// with subcommands given a word none of them has (opledger ops bogus
// --db X) never gets here: unknownSubcommand refuses the word first.
func flagError(cmd *cobra.Command, err error) error {
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		f := ive.GetFlag()
		if takes := flagTakes(f); takes != "" {
			return usageError{fmt.Errorf("--%s takes %s (got %q)", f.Name, takes, ive.GetValue())}
		}
	}
	return usageError{err}
}

// takesAnnotation is the flag annotation that says what a flag takes, for
// flagError, when its type alone does not (addLimitFlag).
const takesAnnotation = "opledger-takes"

// flagTakes says what values f takes, by its annotation or its type; ""
// when neither says.
func flagTakes(f *pflag.Flag) string {
	if t := f.Annotations[takesAnnotation]; len(t) > 0 {
		return t[0]
	}
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number"
	case "duration":
		return "a duration such as 30s, 5m or 1h30m"
	case "bool":
		return "true or false"
	}
	return ""
}

// ExitInterrupted is the exit code of a process stopped at once by a
// second interrupt (Ctrl-C) while it was stopping: 128 and SIGINT's
// number, as a shell reports a process a signal ended.
const ExitInterrupted = 130

// Main runs the command line args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := stopOnSignal(stderr)
	defer stop()
	out := &outputWriter{w: stdout}
	root := newRoot(out, stderr)
	root.SetArgs(args)
	cmd, err := unknownSubcommand(root, args)
	if err == nil {
		cmd, err = root.ExecuteContextC(ctx)
	}
	if out.err != nil && (err == nil || err == out.err) {
		// What the command did is done (a decision recorded, a token
		// revoked): only what it says of it is lost.
		err = fmt.Errorf("the command ran, but its output could not be written: %w", out.err)
	}
	if err == nil {
		return ExitOK
	}
	msg := "opledger: " + oneLine(err.Error()) + notTheAPI(cmd, err)
	var ue usageError
	if errors.As(err, &ue) {
		// One line, as every error: where to read the usage is said on it.
		if cmd != nil {
			msg += " (see " + cmd.CommandPath() + " --help)"
		}
		fmt.Fprintln(stderr, msg)
		return ExitUsage
	}
	fmt.Fprintln(stderr, msg)
	return ExitError
}

// notTheAPI is what an error adds when a command run with --server got
// an answer that is no problem of the opledger API: another server's
// plain "404 page not found" at a mistyped --server reads like a key or
// route that does not exist. Nothing for the API's own problems. The
// URL is not repeated: it may hold a password.
func notTheAPI(cmd *cobra.Command, err error) string {
	if cmd == nil {
		return ""
	}
	if f := cmd.Flags().Lookup("server"); f == nil || f.Value.String() == "" {
		return ""
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		// A 2xx answer that is JSON but not what the route answers
		// (another JSON API at that address), which the client names so.
		if errors.Is(err, client.ErrNotTheAPI) {
			return " (is --server the address of an opledger serve?)"
		}
		return ""
	}
	if ce.Kind() != "" {
		return ""
	}
	if strings.Contains(ce.Problem.Detail, client.ErrNotTheAPI.Error()) {
		return " (is --server the address of an opledger serve?)"
	}
	return " (" + client.ErrNotTheAPI.Error() + ": is --server the address of an opledger serve?)"
}

// outputWriter is a command's standard output, keeping the first write
// that failed (a full disk, a closed file): a command whose output was
// lost does not exit 0.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil && o.err == nil {
		o.err = err
	}
	return n, err
}

// stopOnSignal returns a context that the first SIGTERM or interrupt
// (Ctrl-C) ends: a command then stops as it does (serve and proxy let
// what is in flight finish, within their shutdown timeout). A further
// interrupt while it stops ends the process at once, saying so on
// stderr: someone at the terminal asked twice. A further SIGTERM does
// not: a process manager that sends it again is still given the whole
// stop. stop ends the context and the watch.
func stopOnSignal(stderr io.Writer) (ctx context.Context, stop func()) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() {
		select {
		case <-signals:
			cancel()
		case <-done:
			return
		}
		for {
			select {
			case sig := <-signals:
				if sig != os.Interrupt {
					continue
				}
				fmt.Fprintln(stderr, "opledger: interrupted again: stopping at once; what was in flight is left as a killed process leaves it "+
					"(an operation claimed or sent stays in_progress until its lease ends, then is taken up again or becomes uncertain)")
				os.Exit(ExitInterrupted)
			case <-done:
				return
			}
		}
	})
	return ctx, func() {
		signal.Stop(signals)
		cancel()
		close(done)
		watching.Wait()
	}
}

// noArgs is cobra.NoArgs reporting a usage error on one line, with the
// nearest subcommand when there is one: opledger tokens revok →
// unknown command "revok" for "opledger tokens" (did you mean "revoke"?).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which only its own check sets
	}
	// An empty word is a prefix of every name: no suggestion for it.
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 && args[0] != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError{errors.New(msg)}
}

// unknownSubcommand refuses, before cobra runs anything, a command with
// subcommands given a word none of them has, wherever the flags are
// (noArgs): cobra would otherwise report a flag before the word that the
// parent does not have (opledger ops --db X bogus: "unknown flag: --db"),
// or, given --help, print the parent's help and exit 0
// (opledger ops bogus --help). It returns the parent and the error, or
// nil and nil when args name a command, or a parent alone.
func unknownSubcommand(root *cobra.Command, args []string) (*cobra.Command, error) {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return nil, nil // a shell's completion request: cobra adds its command as it runs
	}
	root.InitDefaultHelpCmd() // as cobra does before it looks
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == nil || !cmd.HasSubCommands() {
		return nil, nil
	}
	if words := positionalWords(cmd, rest); len(words) > 0 {
		return cmd, noArgs(cmd, words)
	}
	return nil, nil
}

// positionalWords are the words of args that are neither flags nor a
// flag's value, up to "--", read as cobra reads them to find a
// subcommand: a flag cmd does not know as a boolean, given as --name
// or -n without "=", takes the word after it as its value. A lone "-"
// and an empty word are words, as pflag reads them.
func positionalWords(cmd *cobra.Command, args []string) []string {
	cmd.InitDefaultHelpFlag()
	takesNoValue := func(f *pflag.Flag) bool { return f != nil && f.NoOptDefVal != "" }
	var words []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return words
		case strings.HasPrefix(a, "--") && !strings.Contains(a, "="):
			if !takesNoValue(cmd.Flags().Lookup(a[2:])) && !takesNoValue(cmd.InheritedFlags().Lookup(a[2:])) {
				i++
			}
		case strings.HasPrefix(a, "-") && len(a) == 2:
			if !takesNoValue(cmd.Flags().ShorthandLookup(a[1:])) && !takesNoValue(cmd.InheritedFlags().ShorthandLookup(a[1:])) {
				i++
			}
		case len(a) <= 1 || !strings.HasPrefix(a, "-"):
			// A word, "-" or "" alike: pflag takes them all as
			// arguments, not flags.
			words = append(words, a)
		}
	}
	return words
}

// settleCommandTree gives the whole tree, cobra's completion command
// included, one way of refusing what it was given: a command with
// subcommands and nothing of its own to run prints its help when called
// alone and refuses anything else as an unknown command (noArgs), and every
// error of a positional-argument check is a usage error. Without it cobra
// prints the help of "opledger tokens revok" and exits 0.
func settleCommandTree(cmd *cobra.Command) {
	if cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = noArgs
		cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if check := cmd.Args; check != nil {
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			var ue usageError
			if err != nil && !errors.As(err, &ue) {
				return usageError{err}
			}
			return err
		}
	}
	for _, sub := range cmd.Commands() {
		settleCommandTree(sub)
	}
}

// refusedInput makes the ledger's refusal of a value the command line gave
// (opledger.ErrInvalidInput or ErrInvalidKey, from the store or a server) a
// usage error. It is applied to the calls that pass flags and arguments to
// the ledger, never to configuration files, whose mistakes are failures (1).
func refusedInput(err error) error {
	if errors.Is(err, opledger.ErrInvalidInput) || errors.Is(err, opledger.ErrInvalidKey) {
		return usageError{err}
	}
	return err
}

// refusedDB makes opledger.ErrNotLedger, Open's refusal of a --db that
// names another application's database, a usage error, for the commands
// that create a ledger (the others apply refusedInput); and so a --db
// naming a file that is not a SQLite database at all (a text file), which
// Open leaves as it is, as the commands that only read refuse it.
func refusedDB(err error) error {
	if errors.Is(err, opledger.ErrNotLedger) {
		return usageError{err}
	}
	if sqlitestore.IsNotDatabase(err) {
		return usageError{notDatabase(err)}
	}
	return err
}

// notDatabase says of SQLite's refusal of a --db that is not a SQLite
// database (its path in err) that the file holds no ledger, and was left
// as it is.
func notDatabase(err error) error {
	return fmt.Errorf("%w: %w, so it holds no ledger; give opledger a file of its own; it was left as it is", opledger.ErrNotLedger, err)
}

// postgresOnly annotates a --db flag that takes only a PostgreSQL URL;
// its one value says what the flag takes instead of SQLite.
const postgresOnly = "opledger-postgres-only"

// checkCommonFlags refuses, before a command runs, a --db or --tenant that
// no store would take: the ledger's own messages name neither flag. An
// explicitly empty --db (--db "$UNSET") is refused too, rather than taken
// as the default, which would not be $OPLEDGER_DB but ./opledger.db.
func checkCommonFlags(cmd *cobra.Command, _ []string) error {
	if f := cmd.Flags().Lookup("db"); f != nil {
		if err := nonEmptyFlags(cmd, "db"); err != nil {
			return err
		}
		name := "--db"
		if !f.Changed && os.Getenv("OPLEDGER_DB") != "" {
			name = "OPLEDGER_DB"
		}
		if takes, ok := f.Annotations[postgresOnly]; ok && f.Value.String() != "" && !pgstore.IsDSN(f.Value.String()) {
			return usageError{fmt.Errorf("%s %s", name, takes[0])}
		}
		if err := checkDSN(name, f.Value.String()); err != nil {
			return err
		}
		if err := checkNotBeside(name, f.Value.String()); err != nil {
			return err
		}
	}
	if f := cmd.Flags().Lookup("tenant"); f != nil && f.Value.String() != "" {
		if err := opledger.ValidateKey(f.Value.String()); err != nil {
			reason := err.Error()
			var ke *opledger.KeyError
			if errors.As(err, &ke) {
				reason = ke.Reason
			}
			return usageError{fmt.Errorf("--tenant takes a name in the operation key syntax: %s", reason)}
		}
	}
	return nil
}

// checkDSN refuses a DSN that names no store opledger opens, or a
// PostgreSQL URL its driver cannot parse, saying what to give instead or
// what is wrong. It repeats no more of the value than a SQLite path, a
// scheme or a PostgreSQL URL without its password (redactedDSN), and
// nothing of a value that may carry credentials otherwise (a libpq
// keyword string, a URL with a user): a DSN may hold a password. Empty is
// the command's default.
func checkDSN(name, dsn string) error {
	if dsn == "" {
		return nil
	}
	const takes = "takes sqlite:PATH or postgres://USER@HOST:PORT/DB"
	if dsn == "sqlite:" || dsn == "sqlite://" {
		return usageError{fmt.Errorf("%s %s: %s names no file; give sqlite:PATH, e.g. sqlite:opledger.db", name, takes, dsn)}
	}
	if path, ok := sqlitestore.DSNPath(dsn); ok && path == ":memory:" {
		// Open refuses it as invalid input, which the commands that
		// create a ledger do not take as the caller's mistake (a
		// configuration's Options may be refused so too): said here, it
		// is the same usage error for every command.
		return usageError{fmt.Errorf("%s takes a file: %s is an in-memory database, which opledger does not use: the ledger must outlive the process and be shared by its connections; give sqlite:PATH (in a temporary directory for a throwaway ledger)", name, dsn)}
	}
	if strings.HasPrefix(dsn, "sqlite:") {
		return nil
	}
	if pgstore.IsDSN(dsn) {
		// Parsed as the store parses it: a DSN it cannot take is the
		// caller's mistake, one whose server does not answer is not.
		// A file it names that this machine lacks (sslrootcert) is the
		// environment's failure, as an unreachable server is: not here.
		if redact.StrayAt(dsn) {
			return usageError{fmt.Errorf("%s: %s", name, redact.StrayAtReason)}
		}
		if _, err := pgxpool.ParseConfig(dsn); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return usageError{fmt.Errorf("%s: the PostgreSQL DSN %s cannot be parsed: %s", name,
				redactedDSN(dsn, "(not repeated: it may hold a password)"), dsnParseReason(err))}
		}
		return nil
	}
	scheme, rest, found := strings.Cut(dsn, ":")
	switch {
	case found && strings.EqualFold(scheme, "sqlite"):
		return usageError{fmt.Errorf("%s %s, the scheme in lower case: give sqlite:%s", name, takes, rest)}
	case found && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")):
		return usageError{fmt.Errorf("%s %s: a PostgreSQL DSN starts with postgres:// in lower case", name, takes)}
	case looksLikePostgres(dsn) && !(found && isScheme(scheme) && strings.HasPrefix(rest, "//")):
		// A libpq keyword string, a URL without its scheme: not echoed.
		return usageError{fmt.Errorf("%s %s: the value (not repeated: it may hold a password) looks like a PostgreSQL DSN: write it as a URL, postgres://USER:PASSWORD@HOST:PORT/DB?search_path=SCHEMA (a SQLite file as sqlite:PATH)", name, takes)}
	case !found || !isScheme(scheme):
		return usageError{fmt.Errorf("%s %s: for the SQLite file %s give sqlite:%s", name, takes, dsn, dsn)}
	}
	return usageError{fmt.Errorf("%s %s (got a %s: DSN)", name, takes, scheme)}
}

// besideSuffixes name the files SQLite and opledger keep beside a
// ledger's file: its write-ahead log, shared memory, rollback journal and
// write lock.
var besideSuffixes = []string{"-wal", "-shm", "-journal", sqlitestore.WriteLockSuffix}

// checkNotBeside refuses a SQLite DSN naming a file kept beside a ledger
// (ledger.db-writelock, which is always there and empty; ledger.db-wal),
// when the file it is kept beside is a SQLite database: a shell
// completes those names after the ledger's, and the commands that write
// would make a second ledger inside the ledger's own file.
func checkNotBeside(name, dsn string) error {
	path, ok := sqlitestore.DSNPath(dsn)
	if !ok {
		return nil
	}
	for _, suffix := range besideSuffixes {
		base, found := strings.CutSuffix(path, suffix)
		if !found || base == "" {
			continue
		}
		if isSQLiteFile(base) {
			return usageError{fmt.Errorf("%s names %s, a file SQLite or opledger keeps beside the ledger %s: give sqlite:%s", name, path, base, base)}
		}
	}
	return nil
}

// isSQLiteFile reports whether the file at path begins as a SQLite
// database does ("SQLite format 3" and a NUL).
func isSQLiteFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	header := make([]byte, 16)
	_, err = io.ReadFull(f, header)
	return err == nil && string(header) == "SQLite format 3\x00"
}

// dsnParseReason is why pgx could not parse a DSN, without the DSN: its
// message is "cannot parse `DSN`: REASON", and pgx's redaction of the DSN
// is not the CLI's (redactedDSN).
func dsnParseReason(err error) string {
	msg := err.Error()
	i := strings.LastIndex(msg, "`: ")
	if i < 0 {
		return "it is not a URL the PostgreSQL driver takes"
	}
	return msg[i+len("`: "):]
}

// isScheme reports whether s can be a URL scheme (RFC 3986).
func isScheme(s string) bool {
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// nonEmptyFlags refuses, as usage errors, the named flags when they were
// given with an empty value (--config "$UNSET"): left out, they mean
// something else (no file, the default store), which the command would
// otherwise silently do.
func nonEmptyFlags(cmd *cobra.Command, names ...string) error {
	for _, name := range names {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		what, ok := emptyFlagHints[name]
		if !ok {
			what = "a value"
		}
		if _, ok := f.Annotations[postgresOnly]; ok {
			what = "a postgres:// URL" // lab run's --db: no SQLite file
		}
		empty := f.Value.String() == ""
		if list, ok := f.Value.(pflag.SliceValue); ok {
			// A list flag given "" holds nothing; "a,,b" holds an empty
			// entry.
			empty = len(list.GetSlice()) == 0
			if !empty && slices.Contains(list.GetSlice(), "") {
				return usageError{fmt.Errorf("--%s has an empty entry: give %s in each, comma-separated", name, what)}
			}
		}
		if empty {
			return usageError{fmt.Errorf("--%s is empty: give %s, or leave the flag out", name, what)}
		}
	}
	return nil
}

// emptyFlagHints say what nonEmptyFlags asks for instead of an empty value.
var emptyFlagHints = map[string]string{
	"db":          "sqlite:PATH or postgres://USER@HOST:PORT/DB",
	"config":      "a file",
	"cpu-profile": "a file",
	"upstream":    "a URL",
	"server":      "the server's URL",
	"token":       "an API token",
	"tenant":      "a tenant's name",
	"cursor":      "the next_cursor of the page before",
	"owner":       "an owner",
	"destination": "a destination",
	"source":      "a source",
	"state":       "states, comma-separated",
	"status":      "a status",
	"order":       "newest or review",
	"name":        "a label, such as the automation using the token",
	// Lists: an empty entry is refused too.
	"accept-scope-change": "an upstream's name",
	"sensitive-field":     "a payload path, e.g. customer.email",
}

// positiveFlags refuses, as usage errors, values of the named int, int64
// or duration flags below 1 (numbers) or not above 0 (durations), which
// the packages behind them would silently replace by their defaults.
func positiveFlags(cmd *cobra.Command, names ...string) error {
	for _, name := range names {
		f := cmd.Flags().Lookup(name)
		switch f.Value.Type() {
		case "duration":
			if d, _ := cmd.Flags().GetDuration(name); d <= 0 {
				return usageError{fmt.Errorf("--%s must be more than 0, got %s", name, d)}
			}
		case "int", "int64":
			if n, _ := strconv.ParseInt(f.Value.String(), 10, 64); n < 1 {
				return usageError{fmt.Errorf("--%s must be at least 1, got %d", name, n)}
			}
		default:
			panic("positiveFlags: --" + name + " is a " + f.Value.Type())
		}
	}
	return nil
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "opledger",
		Short: "An operation ledger: retried side effects that must not happen twice",
		Long: `opledger gives every intended business action a stable key, keeps a durable
ledger of its state and attempts, lets one worker at a time claim it, replays
saved results to repeats, refuses "retries" that change the content, and keeps
every uncertain outcome visible until a lookup, a documented protection or a
named person settles it.`,
		Example: `  opledger demo
  opledger serve --db sqlite:opledger.db
  opledger proxy --upstream https://crm.example.com/api --db sqlite:proxy.db
  opledger ops list --state held,uncertain,failed`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: checkCommonFlags,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newDemoCmd(), newMigrateCmd(), newBackupCmd(), newServeCmd(), newProxyCmd(), newTokensCmd(), newOpsCmd(), newWorkflowsCmd(), newEventsCmd(), newLabCmd(), newBenchCmd(), newVersionCmd())
	root.InitDefaultCompletionCmd()
	root.SetHelpCommand(newHelpCmd(root))
	settleCommandTree(root)
	return root
}

// addDBFlag adds the --db flag, defaulting to $OPLEDGER_DB or the SQLite
// file opledger.db. The help shows an OPLEDGER_DB default without its
// password (or as $OPLEDGER_DB when it is no URL that can be redacted).
func addDBFlag(cmd *cobra.Command, dsn *string) {
	def := os.Getenv("OPLEDGER_DB")
	if def == "" {
		def = opledger.DefaultDSN
	}
	cmd.Flags().StringVar(dsn, "db", def, "ledger store: sqlite:PATH or postgres://… (env OPLEDGER_DB)")
	cmd.Flags().Lookup("db").DefValue = redactedDSN(def, "$OPLEDGER_DB")
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the opledger version and the ledger schema version it uses",
		Example: "  opledger version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The schema version says which ledgers this release reads
			// without migrating them (docs/operations.md, "Upgrading").
			versions, err := sqlitestore.MigrationVersions()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "opledger %s (ledger schema version %d)\n", version(), slices.Max(versions))
			return nil
		},
	}
}

func newMigrateCmd() *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the ledger's tables",
		Long: `migrate applies the schema migrations the store lacks, in one transaction
per store, and says which it applied. On a terminal it draws a progress bar
(one step per migration); piped, it prints only the result. The commands
that write (serve, proxy, tokens create) also migrate a ledger when they
open it, and demo and lab scenario create theirs; those that only read or
decide (ops, events, workflows, tokens list and revoke) never do, and
refuse a ledger older than they use. Run migrate
first to upgrade a large ledger at a time of your choosing
(docs/operations.md, "Upgrading").`,
		Example: `  opledger migrate --db sqlite:opledger.db
  opledger migrate --db postgres://opledger@db.internal:5432/opledger`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				applied      []string
				setBar       func(int)
				finishBar    func()
				barRequested bool
			)
			l, err := openLedger(cmd.Context(), dsn, opledger.Options{MigrationProgress: func(done, total int, name string) {
				if !barRequested {
					barRequested = true
					setBar, finishBar = progress(cmd, total, "migrate")
				}
				if setBar != nil {
					setBar(done)
				}
				applied = append(applied, name)
			}}, stderrNote(cmd))
			if finishBar != nil {
				finishBar()
			}
			if err != nil {
				return refusedDB(err)
			}
			defer l.Close()
			out := cmd.OutOrStdout()
			// Which store, without its password: with several, and
			// $OPLEDGER_DB, "up to date" alone does not say where.
			given := "($OPLEDGER_DB)"
			if cmd.Flags().Changed("db") {
				given = "(the --db given)"
			}
			where := l.StoreName() + " store " + cell(redactedDSN(dsn, given))
			if len(applied) > 0 {
				noun := "migrations"
				if len(applied) == 1 {
					noun = "migration"
				}
				fmt.Fprintf(out, "%s: applied %d %s (%s); it is up to date\n", where, len(applied), noun, strings.Join(applied, ", "))
				return nil
			}
			fmt.Fprintf(out, "%s is up to date: nothing to apply\n", where)
			return nil
		},
	}
	addDBFlag(cmd, &dsn)
	return cmd
}

// writeJSONLines writes one JSON document per line.
func writeJSONLines[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

func envToken() string { return os.Getenv("OPLEDGER_TOKEN") }

func defaultOperator() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "operator"
}

// newHelpCmd is cobra's help command, except that a topic naming no
// command is a usage error rather than the root's help and exit 0.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Errorf("no help topic %q: 'opledger help' lists the commands", strings.Join(args, " "))}
			}
			return target.Help()
		},
	}
}

// listenFirst listens on the address given to --flag, before a command
// opens or writes its ledger, so that an address it cannot listen on (not
// HOST:PORT with a port from 0 to 65535 or a service name: a usage error;
// busy or not this machine's: 1) is refused with nothing written.
func listenFirst(flag, addr string) (net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s takes HOST:PORT, e.g. 127.0.0.1:8080: %w", flag, err)}
	}
	if err := checkPort(port); err != nil {
		return nil, usageError{fmt.Errorf("--%s takes HOST:PORT, e.g. 127.0.0.1:8080: %w", flag, err)}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return ln, nil
}

// checkPort refuses a port that is neither a number from 0 to 65535 nor a
// service name this machine knows (http, https). Empty is port 0, as for
// net.Listen.
func checkPort(port string) error {
	if port == "" {
		return nil
	}
	if strings.Trim(port, "0123456789") == "" || strings.ContainsAny(port[:1], "+-0123456789") {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
			return fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is neither a number from 0 to 65535 nor a known service name", port)
	}
	return nil
}
