package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/server"
)

// loadConfig writes yaml to a file and loads it.
func loadConfig(t *testing.T, yaml string) (*server.FileConfig, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "opledger.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return server.LoadConfig(path)
}

// TestAPIOptionsChecksWebhooks: everything about a webhook source that the
// API would refuse only once the ledger is open (a tenant outside the key
// syntax) is refused by APIOptions, with the source; so are a header that
// is no HTTP field name and a tolerance for the shopify scheme, which
// ignores it.
func TestAPIOptionsChecksWebhooks(t *testing.T) {
	t.Setenv("TEST_WEBHOOK_SECRET", "whsec_a,whsec_b")
	for _, tc := range []struct {
		name, source, want string
	}{
		{"tenant with a space", `{tenant: "bad tenant", scheme: stripe, secret_env: TEST_WEBHOOK_SECRET}`,
			"webhooks.src: tenant takes a name in the operation key syntax: key may contain only letters"},
		{"tenant with a NUL", `{tenant: "a\0b", scheme: stripe, secret_env: TEST_WEBHOOK_SECRET}`,
			"webhooks.src: tenant takes a name in the operation key syntax"},
		{"tenant too long", `{tenant: ` + strings.Repeat("t", 201) + `, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET}`,
			"webhooks.src: tenant takes a name in the operation key syntax: key is longer than 200 bytes"},
		{"tenant with personal data", `{tenant: "ann@example.com", scheme: stripe, secret_env: TEST_WEBHOOK_SECRET}`,
			"keys must carry no personal data"},
		{"header not a token", `{tenant: acme, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET, header: "X Sig"}`,
			`webhooks.src: header "X Sig" is not an HTTP header name`},
		{"header with a colon", `{tenant: acme, scheme: shopify, secret_env: TEST_WEBHOOK_SECRET, header: "X-Sig:"}`,
			`header "X-Sig:" is not an HTTP header name`},
		{"tolerance for shopify", `{tenant: acme, scheme: shopify, secret_env: TEST_WEBHOOK_SECRET, tolerance: 5m}`,
			"webhooks.src: tolerance is for the stripe scheme; a shopify signature carries no timestamp"},
		{"stripe", `{tenant: acme, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET, tolerance: 5m, header: X-Stripe-Sig}`, ""},
		{"shopify", `{tenant: acme, scheme: shopify, secret_env: TEST_WEBHOOK_SECRET, header: X-Shop-Hmac}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, err := loadConfig(t, "webhooks:\n  src: "+tc.source+"\n")
			require.NoError(t, err)
			opts, err := fc.APIOptions()
			if tc.want == "" {
				require.NoError(t, err)
				require.Contains(t, opts.Webhooks, "src")
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "ann@example.com", "a tenant is not repeated, like a key")
		})
	}
	fc, err := loadConfig(t, "webhooks:\n  src: {tenant: acme, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET, header: X-Sig}\n")
	require.NoError(t, err)
	opts, err := fc.APIOptions()
	require.NoError(t, err)
	require.Equal(t, "X-Sig", opts.Webhooks["src"].Verify.Header(), "the header overrides the scheme's")
}

// TestAPIOptionsReportsFirstSourceByName: with several bad sources, the
// one reported is the first by name, on every run (not the first of a map
// iteration).
func TestAPIOptionsReportsFirstSourceByName(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("webhooks:\n")
	for _, name := range []string{"m", "c", "x", "a", "q", "f"} {
		b.WriteString("  " + name + ": {scheme: stripe, secret_env: X}\n") // no tenant
	}
	fc, err := loadConfig(t, b.String())
	require.NoError(t, err)
	for range 50 {
		_, err := fc.APIOptions()
		require.ErrorContains(t, err, ": line 5: webhooks.a: tenant is required")
	}
}

// TestLoadConfigOneDocument: a second YAML document is refused, not
// ignored; a file with no document (empty, or only comments) is refused
// too, naming the file, rather than taken as an empty configuration (a
// truncated or mistaken file would otherwise start a server without its
// destinations and webhooks, silently); an empty mapping ({}) is an
// empty configuration, written so.
func TestLoadConfigOneDocument(t *testing.T) {
	t.Parallel()
	for _, yaml := range []string{"rules: rules.yaml\n---\nwebhooks: {}\n", "rules: rules.yaml\n---\n"} {
		_, err := loadConfig(t, yaml)
		require.ErrorContains(t, err, "only one YAML document is allowed", yaml)
	}
	for _, yaml := range []string{"", "\n", "# rules: rules.yaml\n"} {
		_, err := loadConfig(t, yaml)
		require.ErrorContains(t, err, "opledger.yaml holds no settings (it is empty or only comments): write its settings, or leave --config out to serve without one", "%q", yaml)
	}
	fc, err := loadConfig(t, "{}\n")
	require.NoError(t, err)
	require.Empty(t, fc.DestinationsPath())
}

// TestLoadConfigNamesAFileGivenInstead: destinations or rules written
// inline in the configuration file are recognized, and the error says to
// move them into a file of their own and name that file, never the
// configuration file itself; a destinations file or a rules file given
// to --config, where the configuration file that names it belongs, is
// recognized (a file holding the list alone, unless named opledger.yaml)
// and the error says which file --config takes; any other
// mistake keeps the decoder's own error.
func TestLoadConfigNamesAFileGivenInstead(t *testing.T) {
	t.Parallel()
	_, err := loadConfig(t, "# the CRM\ndestinations:\n  - name: crm\n    url: http://127.0.0.1:1/\n    ref: /id\n")
	require.Contains(t, err.Error(), `line 2: destinations: holds the destinations themselves, but in the file given to --config destinations names the file that holds them: move these entries into a file of their own, such as destinations.yaml (docs/destinations.md), and write the line "destinations: destinations.yaml" here in their place (docs/configuration.md)`)
	require.NotContains(t, err.Error(), `"destinations: opledger.yaml"`, "the file given is never the one to name in it")
	_, err = loadConfig(t, "webhooks: {}\nrules:\n  - name: accepted\n    source: forms\n")
	require.ErrorContains(t, err, `line 2: rules: holds the rules themselves, but in the file given to --config rules names the file that holds them: move these entries into a file of their own, such as rules.yaml (docs/events-and-workflows.md), and write the line "rules: rules.yaml" here in their place`)

	for file, says := range map[string]string{
		"destinations.yaml": `line 1: destinations: holds a list, so destinations.yaml is a destinations file (docs/destinations.md); --config takes the configuration file that names it: give --config a file such as opledger.yaml holding the line "destinations: destinations.yaml" (docs/configuration.md)`,
		"rules.yml":         `line 1: rules: holds a list, so rules.yml is a rules file (docs/events-and-workflows.md); --config takes the configuration file that names it: give --config a file such as opledger.yaml holding the line "rules: rules.yml"`,
		// Whatever its name, unless it is the configuration file's.
		"crm.yaml": `line 1: destinations: holds a list, so crm.yaml is a destinations file (docs/destinations.md); --config takes the configuration file that names it: give --config a file such as opledger.yaml holding the line "destinations: crm.yaml" (docs/configuration.md)`,
	} {
		path := filepath.Join(t.TempDir(), file)
		list := "destinations:\n  - name: crm\n"
		if file == "rules.yml" {
			list = "rules:\n  - name: accepted\n"
		}
		require.NoError(t, os.WriteFile(path, []byte(list), 0o600))
		_, err = server.LoadConfig(path)
		require.ErrorContains(t, err, says)
	}
	// A file named as the list's own that holds settings too is a
	// configuration file: the entries move to a file of another name.
	path := filepath.Join(t.TempDir(), "destinations.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rules: rules.yaml\ndestinations:\n  - name: crm\n"), 0o600))
	_, err = server.LoadConfig(path)
	require.ErrorContains(t, err, `such as my-destinations.yaml (docs/destinations.md), and write the line "destinations: my-destinations.yaml" here`)

	_, err = loadConfig(t, "destination: destinations.yaml\n")
	require.ErrorContains(t, err, "field destination not found", "a misspelt field keeps the decoder's error")
	require.NotContains(t, err.Error(), "holds a list")
}

// TestLoadConfigSizeLimit: a configuration file larger than 4 MiB is
// refused without being decoded, as is anything that is not a regular
// file.
func TestLoadConfigSizeLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 4<<20)+"\n"), 0o600))
	_, err := server.LoadConfig(big)
	require.EqualError(t, err, "read config: "+big+": larger than 4 MiB")
	_, err = server.LoadConfig(dir)
	require.EqualError(t, err, "read config: "+dir+": not a regular file")
}

// TestApprovalDestinations: require_approval's names are returned as
// written; one outside the destination syntax is refused by its
// position, not repeated; a value that is not a list is refused with
// its line.
func TestApprovalDestinations(t *testing.T) {
	fc, err := loadConfig(t, "require_approval: [payments, crm.eu]\n")
	require.NoError(t, err)
	names, err := fc.ApprovalDestinations()
	require.NoError(t, err)
	require.Equal(t, []string{"payments", "crm.eu"}, names)

	fc, err = loadConfig(t, "require_approval:\n  - payments\n  - ann@example.com\n")
	require.NoError(t, err)
	_, err = fc.ApprovalDestinations()
	require.ErrorContains(t, err, "require_approval: entry 2 takes a destination name, in the operation key syntax: ")
	require.NotContains(t, err.Error(), "ann@example.com")

	_, err = loadConfig(t, "require_approval: payments\n")
	require.ErrorContains(t, err, "line 1: require_approval: takes a list")
}

// TestDestinationOwners: owners are returned as written; a destination
// name outside the key syntax (not repeated), an empty owner and an owner
// Record would refuse are refused, the first by name first.
func TestDestinationOwners(t *testing.T) {
	fc, err := loadConfig(t, "owners:\n  payments: finance\n  crm.eu: sales-ops\n")
	require.NoError(t, err)
	owners, err := fc.DestinationOwners()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"payments": "finance", "crm.eu": "sales-ops"}, owners)

	for _, tc := range []struct{ file, want string }{
		{"owners:\n  \"ann@example.com\": finance\n", "owners: a destination name takes the operation key syntax: "},
		{"owners:\n  payments: \"\"\n  crm: \" \"\n", "owners.crm: names no owner"},
		{"owners:\n  payments: " + strings.Repeat("f", 201) + "\n", "owners.payments: owner is at most 200 bytes"},
	} {
		fc, err := loadConfig(t, tc.file)
		require.NoError(t, err)
		_, err = fc.DestinationOwners()
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "ann@example.com")
	}
	_, err = loadConfig(t, "owners: [finance]\n")
	require.ErrorContains(t, err, "line 1: owners: takes a mapping")
}

// oneDestination is a destinations file of one destination.
const oneDestination = "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/records\n    ref: /id\n"

// fileWriter gives a temporary directory and a function that writes a
// file in it and returns its path.
func fileWriter(t *testing.T) (string, func(name, text string) string) {
	t.Helper()
	dir := t.TempDir()
	return dir, func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
}

// TestSharedSettings: the text of the destinations and rules files the
// configuration names, resolved against its directory; both empty when
// it names neither (as without a configuration file); a file that is no
// regular file is refused, never read.
func TestSharedSettings(t *testing.T) {
	_, write := fileWriter(t)
	dests := oneDestination
	write("dests.yaml", dests)
	write("rules.yaml", "# the rules\n")
	fc, err := server.LoadConfig(write("both.yaml", "destinations: dests.yaml\nrules: rules.yaml\n"))
	require.NoError(t, err)
	settings, err := fc.SharedSettings()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"destinations_file": dests, "rules_file": "# the rules\n"}, settings)

	fc, err = server.LoadConfig(write("none.yaml", "require_approval: [payments]\n"))
	require.NoError(t, err)
	settings, err = fc.SharedSettings()
	require.NoError(t, err)
	require.Equal(t, server.NoSharedSettings(), settings)
	require.Equal(t, map[string]string{"destinations_file": "", "rules_file": ""}, settings)

	fc, err = server.LoadConfig(write("zero.yaml", "rules: /dev/zero\n"))
	require.NoError(t, err)
	_, err = fc.SharedSettings()
	require.EqualError(t, err, "config rules: /dev/zero: not a regular file")
}

// TestConfigFilesReadOnce: the settings announced are the text the
// loaders parsed, even when a file changes in between; the loaders'
// errors read as destination.LoadFile's and opledger.LoadRules's.
func TestConfigFilesReadOnce(t *testing.T) {
	dir, write := fileWriter(t)
	dests := oneDestination
	rules := "rules:\n  - name: r\n    source: forms\n    type: t\n    operations:\n      - key: k:{event.id}\n        action: a\n        destination: crm\n"
	write("dests.yaml", dests)
	write("rules.yaml", rules)
	fc, err := server.LoadConfig(write("opledger.yaml", "destinations: dests.yaml\nrules: rules.yaml\n"))
	require.NoError(t, err)
	set, err := fc.LoadDestinations(destination.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, set.Len())
	api, err := fc.APIOptions()
	require.NoError(t, err)
	require.NotNil(t, api.Rules)
	// Both files change after they were loaded.
	write("dests.yaml", "destinations: []\n")
	write("rules.yaml", "# emptied\n")
	settings, err := fc.SharedSettings()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"destinations_file": dests, "rules_file": rules}, settings)

	// No destinations file: no set, no error.
	fc, err = server.LoadConfig(write("none.yaml", "require_approval: [payments]\n"))
	require.NoError(t, err)
	set, err = fc.LoadDestinations(destination.LoadOptions{})
	require.NoError(t, err)
	require.Nil(t, set)

	// The loaders' errors.
	for _, p := range []string{"bad-dests.yaml", "bad-rules.yaml"} {
		write(p, "nothing: here\n")
	}
	fc, err = server.LoadConfig(write("bad.yaml", "destinations: bad-dests.yaml\nrules: bad-rules.yaml\n"))
	require.NoError(t, err)
	_, fileErr := destination.LoadFile(filepath.Join(dir, "bad-dests.yaml"), destination.LoadOptions{})
	_, err = fc.LoadDestinations(destination.LoadOptions{})
	require.Error(t, fileErr)
	require.EqualError(t, err, fileErr.Error())
	_, fileErr = opledger.LoadRules(filepath.Join(dir, "bad-rules.yaml"))
	_, err = fc.APIOptions()
	require.Error(t, fileErr)
	require.EqualError(t, err, "config rules: "+fileErr.Error())
	fc, err = server.LoadConfig(write("missing.yaml", "destinations: gone.yaml\nrules: gone.yaml\n"))
	require.NoError(t, err)
	_, fileErr = destination.LoadFile(filepath.Join(dir, "gone.yaml"), destination.LoadOptions{})
	_, err = fc.LoadDestinations(destination.LoadOptions{})
	require.EqualError(t, err, fileErr.Error())
	_, fileErr = opledger.LoadRules(filepath.Join(dir, "gone.yaml"))
	_, err = fc.APIOptions()
	require.EqualError(t, err, "config rules: "+fileErr.Error())
}

// TestConfigRefusalsNameFileAndLine: a webhook source, a require_approval
// entry and an owner refused after the file decoded are said with the
// file and the line of the entry, as a value of the wrong kind is: they
// named neither, leaving a long file to be searched.
func TestConfigRefusalsNameFileAndLine(t *testing.T) {
	t.Setenv("TEST_WEBHOOK_SECRET", "whsec_a")
	path := filepath.Join(t.TempDir(), "opledger.yaml")
	for _, tc := range []struct {
		file, want string
		check      func(*server.FileConfig) error
	}{
		{"rules: \"\"\nwebhooks:\n  ok: {tenant: acme, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET}\n  src:\n    scheme: stripe\n",
			"config " + path + ": line 4: webhooks.src: tenant is required",
			func(c *server.FileConfig) error { _, err := c.APIOptions(); return err }},
		{"webhooks:\n  src: {tenant: acme, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET, tolerance: 300}\n",
			"config " + path + `: line 2: webhooks.src: tolerance "300" is not a positive duration like 5m`,
			func(c *server.FileConfig) error { _, err := c.APIOptions(); return err }},
		{"webhooks:\n  src: {tenant: acme, scheme: Stripe, secret_env: TEST_WEBHOOK_SECRET}\n",
			"config " + path + `: line 2: webhooks.src: webhook config: scheme must be "stripe" or "shopify"`,
			func(c *server.FileConfig) error { _, err := c.APIOptions(); return err }},
		{"webhooks:\n  \"bad src\": {tenant: acme, scheme: stripe, secret_env: TEST_WEBHOOK_SECRET}\n",
			"config " + path + ": line 2: webhooks: source name: invalid key: key may contain only letters, digits and . _ : / - (byte 4, ' ', is not one of them)",
			func(c *server.FileConfig) error { _, err := c.APIOptions(); return err }},
		{"require_approval:\n  - payments\n  - \"a b\"\n",
			"config " + path + ": line 3: require_approval: entry 2 takes a destination name, in the operation key syntax: key may contain only letters, digits and . _ : / - (byte 2, ' ', is not one of them)",
			func(c *server.FileConfig) error { _, err := c.ApprovalDestinations(); return err }},
		{"owners:\n  payments: finance\n  crm: \" \"\n",
			"config " + path + ": line 3: owners.crm: names no owner: give a team or an on-call handle, or leave the destination out",
			func(c *server.FileConfig) error { _, err := c.DestinationOwners(); return err }},
		{"owners:\n  \"a b\": finance\n",
			"config " + path + ": line 2: owners: a destination name takes the operation key syntax: key may contain only letters, digits and . _ : / - (byte 2, ' ', is not one of them)",
			func(c *server.FileConfig) error { _, err := c.DestinationOwners(); return err }},
	} {
		require.NoError(t, os.WriteFile(path, []byte(tc.file), 0o600))
		fc, err := server.LoadConfig(path)
		require.NoError(t, err, tc.file)
		require.EqualError(t, tc.check(fc), tc.want, tc.file)
	}
}

// TestDestinationNameWarnings: a require_approval entry or an owners
// name that is not a destination of the destinations file but one letter
// (or only the case) off one is warned of, with its line: written so, it
// gates or names nothing the executor sends, and the destination meant
// runs without approval or owner. Names far from every destination (a
// worker's own) and names of the file are not.
func TestDestinationNameWarnings(t *testing.T) {
	dir, write := fileWriter(t)
	write("dests.yaml", "destinations:\n  - name: payments\n    url: http://127.0.0.1:1/p\n    ref: /id\n  - name: crm\n    url: http://127.0.0.1:1/c\n    ref: /id\n")
	path := write("opledger.yaml", "destinations: dests.yaml\nrequire_approval: [paymnets, crm, shipping]\nowners:\n  CRM: sales\n  payments: finance\n  worker-queue: ops\n")
	fc, err := server.LoadConfig(path)
	require.NoError(t, err)
	set, err := fc.LoadDestinations(destination.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{
		"config " + path + `: line 2: require_approval: "paymnets" is not a destination of ` + filepath.Join(dir, "dests.yaml") + `, did you mean "payments"? As written, it applies only to operations recorded for "paymnets"`,
		"config " + path + `: line 4: owners: "CRM" is not a destination of ` + filepath.Join(dir, "dests.yaml") + `, did you mean "crm"? As written, it applies only to operations recorded for "CRM"`,
	}, fc.DestinationNameWarnings(set))
	require.Empty(t, (&server.FileConfig{}).DestinationNameWarnings(nil))
}

// TestDestinationLine: the line of a destination's timeout in the
// destinations file, or of its entry when it gives none, for the error
// that refuses the timeout; 0 before the file is read, or for a name it
// does not hold.
func TestDestinationLine(t *testing.T) {
	t.Parallel()
	_, write := fileWriter(t)
	write("dests.yaml", "destinations:\n  - name: crm\n    url: http://127.0.0.1:1/\n    ref: /id\n    timeout: 25s\n"+
		"  - name: mail\n    url: http://127.0.0.1:1/\n    ref: /id\n")
	fc, err := server.LoadConfig(write("opledger.yaml", "destinations: dests.yaml\n"))
	require.NoError(t, err)
	require.Zero(t, fc.DestinationLine("crm"), "not read yet")
	_, err = fc.LoadDestinations(destination.LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, 5, fc.DestinationLine("crm"))
	require.Equal(t, 6, fc.DestinationLine("mail"))
	require.Zero(t, fc.DestinationLine("nope"))
}
