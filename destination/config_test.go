package destination_test

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// env is a LookupEnv over a map.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const exampleYAML = `
destinations:
  # Idempotency key and an authoritative lookup.
  - name: crm
    url: https://crm.example.com/api/inquiries
    headers:
      Authorization: Bearer ${CRM_TOKEN}
      X-Source: opledger
    body: |
      {"external_ref": {{json .Key}}, "submission": {{json .Payload.submission}}}
    ref: /id
    timeout: 5s
    idempotency:
      header: Idempotency-Key
      retention: 24h
    lookup:
      url: https://crm.example.com/api/inquiries?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 30s
      match:
        - record: /external_ref
          value: "{{.Key}}"
        - record: /submission
          payload: /submission
    retry:
      max_attempts: 3
      initial_delay: 2s  # the rest take the defaults

  # Unique external reference: a duplicate create answers 409.
  - name: tickets
    method: put
    url: https://tickets.example.com/v2/tickets/{{pathescape .Key}}
    headers:
      X-Api-Key: ${TICKETS_KEY}
    ref: /ticket/number
    unique_reference:
      conflict_status: 409
    lookup:
      url: https://tickets.example.com/v2/tickets/{{pathescape .Key}}
      ref: /ticket/number
      match:
        - record: /ticket/subject
          payload: /subject

  # Nothing declared: every uncertain outcome is held for a person.
  - name: email
    url: https://mail.example.com/send
    headers:
      Authorization: Basic ${MAIL_BASIC}
    ref: /message_id
`

var exampleEnv = map[string]string{"CRM_TOKEN": "crm-s3cret", "TICKETS_KEY": "tk-s3cret", "MAIL_BASIC": "bWFpbDpzM2NyZXQ="}

func TestLoadExample(t *testing.T) {
	t.Parallel()
	set, err := destination.Load([]byte(exampleYAML), destination.LoadOptions{LookupEnv: env(exampleEnv)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	require.Equal(t, []string{"crm", "email", "tickets"}, set.Names())

	crm, ok := set.Get("crm")
	require.True(t, ok)
	require.Equal(t, destination.Capabilities{
		IdempotencyKey: &destination.IdempotencyKey{Header: "Idempotency-Key", Retention: 24 * time.Hour},
		Lookup:         &destination.Lookup{Authoritative: true, VisibilityDelay: 30 * time.Second},
	}, crm.Capabilities())
	require.Equal(t, "idempotency key kept 24h0m0s, authoritative lookup (visibility delay 30s)", crm.Capabilities().String())

	tickets, _ := set.Get("tickets")
	require.Equal(t, &destination.UniqueReference{ConflictStatus: 409}, tickets.Capabilities().UniqueReference)
	require.False(t, tickets.Capabilities().Lookup.Authoritative)

	email, _ := set.Get("email")
	require.True(t, email.Capabilities().None())
	require.Equal(t, "none", email.Capabilities().String())

	policies := set.RetryPolicies()
	require.Equal(t, opledger.RetryPolicy{MaxAttempts: 3, InitialDelay: 2 * time.Second, MaxDelay: 5 * time.Minute, Deadline: 24 * time.Hour}, policies["crm"])
	require.NotContains(t, policies, "email", "no retry section: the ledger's default applies")
	require.NotContains(t, policies, "tickets")
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "destinations.yaml")
	require.NoError(t, os.WriteFile(path, []byte(exampleYAML), 0o600))
	set, err := destination.LoadFile(path, destination.LoadOptions{LookupEnv: env(exampleEnv)})
	require.NoError(t, err)
	require.NoError(t, set.Close())

	_, err = destination.LoadFile(filepath.Join(t.TempDir(), "missing.yaml"), destination.LoadOptions{})
	require.ErrorContains(t, err, "read destinations")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("destinations:\n  - name: x\n    urll: https://x\n"), 0o600))
	_, err = destination.LoadFile(bad, destination.LoadOptions{})
	require.ErrorContains(t, err, bad+": ")
	require.ErrorContains(t, err, "line 3: field urll not found")

	// A file larger than 4 MiB, or one that is not a regular file, is
	// refused unread.
	big := filepath.Join(t.TempDir(), "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte(exampleYAML+"# "+strings.Repeat("x", 4<<20)+"\n"), 0o600))
	_, err = destination.LoadFile(big, destination.LoadOptions{LookupEnv: env(exampleEnv)})
	require.EqualError(t, err, "read destinations: "+big+": larger than 4 MiB")
	dir := t.TempDir()
	_, err = destination.LoadFile(dir, destination.LoadOptions{})
	require.EqualError(t, err, "read destinations: "+dir+": not a regular file")
}

// TestValidHeaderName: an HTTP field name is a non-empty RFC 9110 token.
func TestValidHeaderName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Idempotency-Key", "X-Shopify-Hmac-Sha256", "x_sig", "A1!#$%&'*+-.^_`|~"} {
		require.True(t, destination.ValidHeaderName(name), name)
	}
	for _, name := range []string{"", "X Sig", "X-Sig:", "X\x00", "Ü-Sig", "X\r\nY", "(X)"} {
		require.False(t, destination.ValidHeaderName(name), "%q", name)
	}
}

// TestHTTPTimeout: an HTTP destination reports the bound of its calls, so
// that an executor can check it against its own.
func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	for cfg, want := range map[destination.Duration]time.Duration{0: destination.DefaultTimeout, destination.Duration(25 * time.Second): 25 * time.Second} {
		h, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "http://127.0.0.1:1/x", Ref: "/id", Timeout: cfg}, destination.LoadOptions{})
		require.NoError(t, err)
		var d destination.Destination = h
		timed, ok := d.(destination.Timed)
		require.True(t, ok)
		require.Equal(t, want, timed.Timeout())
		require.NoError(t, h.Close())
	}
	// A negative timeout, or one shorter than MinTimeout, bounds no call
	// that could be answered: refused, not taken as the default.
	for d, want := range map[time.Duration]string{-time.Second: "timeout: is -1s: it must be above 0",
		time.Nanosecond: "timeout: is 1ns: it must be at least 100ms", destination.MinTimeout - 1: "it must be at least 100ms"} {
		_, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "http://127.0.0.1:1/x", Ref: "/id", Timeout: destination.Duration(d)}, destination.LoadOptions{})
		require.ErrorContains(t, err, want)
	}
	h, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "http://127.0.0.1:1/x", Ref: "/id", Timeout: destination.Duration(destination.MinTimeout)}, destination.LoadOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Close())
}

// A destination with tenants serves only those; without, every tenant.
func TestLoadTenants(t *testing.T) {
	t.Parallel()
	set, err := destination.Load([]byte(`destinations:
  - name: crm
    url: https://crm.example.com/x
    ref: /id
    tenants: [acme, acme-eu]
  - name: mail
    url: https://mail.example.com/x
    ref: /id
`), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	mail, _ := set.Get("mail")
	for tenant, want := range map[string]bool{"acme": true, "acme-eu": true, "globex": false, "": false} {
		require.Equal(t, want, destination.Serves(crm, tenant), tenant)
		require.True(t, destination.Serves(mail, tenant), tenant)
	}
	// For opledger.Options.DestinationTenants: only the destinations that
	// list their tenants.
	require.Equal(t, map[string][]string{"crm": {"acme", "acme-eu"}}, set.Tenants())
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"empty", "", []string{"the file is empty"}},
		{"no destinations", "destinations: []\n", []string{"no destinations"}},
		{"unknown top-level field", "destination:\n  - name: crm\n", []string{"line 1: field destination not found"}},
		{"unknown field", base + "    retries: 3\n", []string{"line 5: field retries not found"}},
		{"unknown nested field", base + "    lookup:\n      url: https://crm.example.com/x\n      authorative: true\n", []string{"line 7: field authorative not found"}},
		{"duration without unit", base + "    timeout: 10\n", []string{`line 5: destination crm: timeout: duration "10" needs a unit, e.g. 10s`}},
		{"timeout too short", base + "    timeout: 1ms\n", []string{"line 5: destination crm: timeout: is 1ms: it must be at least 100ms"}},
		{"bad duration", base + "    timeout: soon\n", []string{`line 5: destination crm: timeout: "soon" is not a duration`}},
		{"nested duration", base + "    retry: {max_attempts: 3, initial_delay: 10}\n", []string{`line 5: destination crm: retry.initial_delay: duration "10" needs a unit`}},
		// Every mistake of decoding is said, by line: a duration used to
		// stop the decoder, leaving an unknown field unsaid.
		{"duration and unknown field", base + "    timeout: 10\n    retries: 3\n", []string{
			"line 5: destination crm: timeout: duration \"10\" needs a unit, e.g. 10s\nline 6: field retries not found"}},
		{"unknown field and duration", base + "    retries: 3\n    retry: {max_attempts: three, initial_delay: 10}\n", []string{
			"line 5: field retries not found in type destination.HTTPConfig\n" +
				"line 6: destination crm: retry.max_attempts: takes a whole number, not \"three\"\n" +
				"line 6: destination crm: retry.initial_delay: duration \"10\" needs a unit, e.g. 10s"}},
		{"two documents", base + "---\n" + base, []string{"only one YAML document is allowed"}},
		{"an empty second document", base + "---\n", []string{"only one YAML document is allowed"}},
		{"missing fields", "destinations:\n  - method: TRACE\n", []string{
			"line 2: destination 1: name: is required",
			"line 2: destination 1: method: must be POST, PUT, PATCH, DELETE or GET",
			"destination 1: url: is required",
			"destination 1: ref: is required",
		}},
		{"duplicate name", base + base[len("destinations:\n"):], []string{"line 5: destination crm: name: is already used by the destination at line 2"}},
		{"templated host", "destinations:\n  - name: crm\n    url: https://{{.Payload.host}}/x\n    ref: /id\n",
			[]string{"line 3: destination crm: url: the scheme and host must be written out"}},
		{"not http", "destinations:\n  - name: crm\n    url: ftp://crm.example.com/x\n    ref: /id\n",
			[]string{"url: must start with http:// or https://"}},
		{"secret in url", "destinations:\n  - name: crm\n    url: https://crm.example.com/x?key=${KEY}\n    ref: /id\n",
			[]string{"url: environment references are only expanded in headers"}},
		{"bad template", "destinations:\n  - name: crm\n    url: https://crm.example.com/{{.Key\n    ref: /id\n",
			[]string{"url: parse template"}},
		{"bad pointer", "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: id\n",
			[]string{"line 4: destination crm: ref: JSON pointer \"id\" must start with /"}},
		{"literal secret", base + "    headers:\n      Authorization: Bearer abc123\n",
			[]string{"line 6: destination crm: headers.Authorization: carries a credential, so its value must come from an environment variable"}},
		{"literal api key", base + "    headers:\n      X-Api-Key: abc123\n", []string{"headers.X-Api-Key: carries a credential"}},
		{"missing variable", base + "    headers:\n      Authorization: Bearer ${NOPE}\n",
			[]string{"headers.Authorization: environment variable NOPE is not set"}},
		{"malformed reference", base + "    headers:\n      X-Source: ${oops\n", []string{"malformed ${NAME} reference"}},
		{"templated header", base + "    headers:\n      X-Customer: \"{{.Payload.id}}\"\n", []string{"header values are not templates"}},
		{"idempotency header in headers", base + "    headers:\n      Idempotency-Key: ${K}\n    idempotency:\n      header: Idempotency-Key\n      retention: 1h\n",
			[]string{"headers.Idempotency-Key: is the idempotency header"}},
		{"fixed idempotency key", base + "    headers:\n      Idempotency-Key: ${K}\n",
			[]string{"line 6: destination crm: headers.Idempotency-Key: would send one fixed idempotency key with every operation"}},
		{"fixed idempotency key, other spelling", base + "    headers:\n      x-idempotency-key: order-1\n",
			[]string{"headers.x-idempotency-key: would send one fixed idempotency key", "idempotency: {header: X-Idempotency-Key"}},
		{"fixed idempotency key in a lookup", base + "    lookup:\n      url: https://crm.example.com/x\n      headers:\n        Idempotency-Key: k\n      match: [{record: /a, payload: /a}]\n",
			[]string{"lookup.headers.Idempotency-Key: would send one fixed idempotency key"}},
		{"idempotency without retention", base + "    idempotency:\n      header: Idempotency-Key\n",
			[]string{"line 5: destination crm: idempotency.retention: is required"}},
		{"idempotency without header", base + "    idempotency:\n      retention: 1h\n",
			[]string{"idempotency.header: is required unless the url or body template sends {{.IdempotencyKey}}"}},
		{"lookup without match", base + "    lookup:\n      url: https://crm.example.com/x\n",
			[]string{"line 5: destination crm: lookup.match: needs at least one entry"}},
		{"match without side", base + "    lookup:\n      url: https://crm.example.com/x\n      match:\n        - record: /a\n",
			[]string{"line 8: destination crm: lookup.match.0: needs exactly one of payload"}},
		{"not_found with results", base + "    lookup:\n      url: https://crm.example.com/x\n      results: /items\n      not_found: {field: /code, value: none}\n      match: [{record: /a, payload: /a}]\n",
			[]string{"line 8: destination crm: lookup.not_found: a search (results) finds nothing as an empty list"}},
		{"not_found without field", base + "    lookup:\n      url: https://crm.example.com/x\n      not_found:\n        value: none\n      match: [{record: /a, payload: /a}]\n",
			[]string{"line 7: destination crm: lookup.not_found.field: is required"}},
		{"not_found without value", base + "    lookup:\n      url: https://crm.example.com/x\n      not_found:\n        field: /code\n      match: [{record: /a, payload: /a}]\n",
			[]string{"line 7: destination crm: lookup.not_found.value: is required"}},
		{"not_found field not a pointer", base + "    lookup:\n      url: https://crm.example.com/x\n      not_found:\n        field: code\n        value: none\n      match: [{record: /a, payload: /a}]\n",
			[]string{"line 8: destination crm: lookup.not_found.field:"}},
		{"unique reference without lookup", base + "    unique_reference: {}\n", []string{"unique_reference: needs a lookup"}},
		{"unique reference not 4xx", base + "    unique_reference:\n      conflict_status: 200\n    lookup:\n      url: https://crm.example.com/x\n      match: [{record: /a, payload: /a}]\n",
			[]string{"unique_reference.conflict_status: must be a 4xx status"}},
		{"bad retry", base + "    retry:\n      max_attempts: 0\n", []string{"line 5: destination crm: retry: max attempts must be at least 1"}},
		{"no tenant", base + "    tenants: []\n", []string{"line 5: destination crm: tenants: lists no tenant"}},
		{"bad tenant", base + "    tenants: [acme, \"a b\"]\n", []string{"line 5: destination crm: tenants.1: not a tenant name: key may contain only"}},
		{"get with body", "destinations:\n  - name: crm\n    method: GET\n    url: https://crm.example.com/x\n    body: x\n    ref: /id\n",
			[]string{"line 5: destination crm: body: a GET request has no body"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := destination.Load([]byte(tc.yaml), destination.LoadOptions{LookupEnv: env(map[string]string{"K": "v"})})
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestLoadKindErrors: a value of the wrong kind is named by its field and
// the kind the field takes, in the form of the other errors, never by
// the decoder's Go types; every such value is reported.
func TestLoadKindErrors(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"max_attempts as a word", base + "    retry:\n      max_attempts: five\n",
			[]string{`line 6: destination crm: retry.max_attempts: takes a whole number, not "five"`}},
		{"several", base + "    lookup:\n      authoritative: maybe\n      match: {record: /a}\n    tenants: acme\n    unique_reference: {conflict_status: 4o9}\n",
			[]string{
				`line 6: destination crm: lookup.authoritative: takes true or false, not "maybe"`,
				`line 7: destination crm: lookup.match: takes a list (one "- item" per line, or [a, b]), not a mapping`,
				`line 8: destination crm: tenants: takes a list`,
				`line 9: destination crm: unique_reference.conflict_status: takes a whole number, not "4o9"`,
			}},
		{"a list for text", "destinations:\n  - name: [crm]\n", []string{"line 2: destination 1: name: takes text, not a list"}},
		{"an entry that is not a mapping", "destinations:\n  - crm\n", []string{`line 2: destination 1: takes a mapping of its own fields, indented below it, not "crm"`}},
		{"headers as text", base + "    headers: Bearer abc123\n", []string{"line 5: destination crm: headers: takes a mapping of names to values (one \"Name: value\" per line), not that value"}},
		{"destinations as a mapping of names", "destinations:\n  crm:\n    url: https://crm.example.com/x\n    ref: /id\n",
			[]string{`line 1: destinations: takes a list with one entry per destination, each beginning with "- name: …" and its fields indented below it, not a mapping of names: write "- name: crm" in place of "crm:"`}},
		{"destinations as one mapping", "destinations:\n  name: crm\n  url: https://crm.example.com/x\n",
			[]string{`line 1: destinations: takes a list with one entry per destination`, `not a mapping: begin the entry with "- "`}},
		{"destinations naming a file", "destinations: destinations.yaml\n",
			[]string{`line 1: destinations: takes a list with one entry per destination`, `not "destinations.yaml"; a line "destinations: FILE" belongs in the --config file`}},
		{"the file a list", "- name: crm\n", []string{`line 1: the file must be a mapping whose destinations: lists the destinations, not a list`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := destination.Load([]byte(tc.yaml), destination.LoadOptions{})
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			for _, goTalk := range []string{"cannot unmarshal", "!!", "destination.", "[]string", "abc123"} {
				require.NotContains(t, err.Error(), goTalk)
			}
		})
	}
}

// TestLoadDuplicateNameChecksTheEntry: a name used twice is reported, and
// the rest of the entry is checked too (every problem at once).
func TestLoadDuplicateNameChecksTheEntry(t *testing.T) {
	t.Parallel()
	_, err := destination.Load([]byte(`destinations:
  - name: crm
    url: https://crm.example.com/x
    ref: /id
  - name: crm
    url: ftp://crm.example.com/x
    ref: id
`), destination.LoadOptions{})
	require.Error(t, err)
	require.Equal(t, []string{
		"line 5: destination crm: name: is already used by the destination at line 2",
		"line 6: destination crm: url: must start with http:// or https://",
		`line 7: destination crm: ref: JSON pointer "id" must start with /`,
	}, strings.Split(err.Error(), "\n"))
}

// TestLoadTemplatesThatCannotRun: a template that parses but cannot run
// for any operation is a configuration error naming the destination, the
// field and the name, in the operation's terms; one that reads the
// payload is not judged on the sample's empty payload.
func TestLoadTemplatesThatCannotRun(t *testing.T) {
	t.Parallel()
	fields := "(fields: .Key, .Payload, .Tenant, .Action, .Destination, .Version, .IdempotencyKey)"
	dest := func(extra string) string {
		return "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n" + extra
	}
	lookup := func(url, match string) string {
		return dest("    lookup:\n      url: " + url + "\n      match:\n        - record: /ref\n          value: '" + match + "'\n")
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"body", dest("    body: '{\"ref\": {{json .Kee}}}'\n"),
			"line 5: destination crm: body: .Kee is not a field of the operation, did you mean .Key? " + fields},
		{"body in a branch", dest("    body: '{{if .Payload.note}}{{json .Payloads.note}}{{end}}'\n"),
			"line 5: destination crm: body: .Payloads is not a field of the operation, did you mean .Payload? " + fields},
		{"url", "destinations:\n  - name: crm\n    url: https://crm.example.com/x/{{pathescape .Owner}}\n    ref: /id\n",
			"line 3: destination crm: url: .Owner is not a field of the operation " + fields},
		{"lookup url through $", lookup("https://crm.example.com/x?t={{urlquery $.tenant}}", "{{.Key}}"),
			"line 6: destination crm: lookup.url: .tenant is not a field of the operation, did you mean .Tenant? " + fields},
		{"match value", lookup("https://crm.example.com/x", "{{.Key.ref}}"),
			"line 9: destination crm: lookup.match.0.value: .Key.ref: .Key is text, which has no fields (only .Payload has)"},
		{"function arguments", dest("    body: '{{json}}'\n"), "line 5: destination crm: body: {{json}}: wrong number of args for json: want 1 got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := destination.Load([]byte(tc.yaml), destination.LoadOptions{})
			require.EqualError(t, err, tc.want)
		})
	}

	// What depends on the payload is left to each operation's payload.
	for _, body := range []string{
		`{"n": {{json (index .Payload.items 0)}}, "c": {{len .Payload.items}}}`,
		`{{with .Payload.customer}}{{json .id}}{{end}}`,
		`{{range .Payload.lines}}{{json .sku}}{{end}}`,
		`{{if lt .Payload.units 3}}small{{end}}`,
		`{{$p := .Payload}}{{json $p.customer.email}} {{json (print .Tenant ":" .Key)}} {{.Version}} {{.IdempotencyKey}}`,
	} {
		set, err := destination.Load([]byte(dest("    body: '"+body+"'\n")), destination.LoadOptions{})
		require.NoError(t, err, body)
		require.NoError(t, set.Close())
	}
}

func TestLoadNeverShowsSecrets(t *testing.T) {
	t.Parallel()
	doc := `
destinations:
  - name: crm
    url: https://crm.example.com/x
    headers:
      Authorization: Bearer ${CRM_TOKEN}
      X-Api-Key: ${EMPTY}
    ref: nope
`
	_, err := destination.Load([]byte(doc), destination.LoadOptions{LookupEnv: env(map[string]string{"CRM_TOKEN": "crm-s3cret", "EMPTY": ""})})
	require.Error(t, err)
	require.Contains(t, err.Error(), "headers.X-Api-Key: environment variable EMPTY is set but empty")
	require.NotContains(t, err.Error(), "crm-s3cret")
}

func TestNewHTTP(t *testing.T) {
	t.Parallel()
	h, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "http://127.0.0.1:1/x", Ref: "/id",
		Headers: map[string]string{"Authorization": "Bearer ${T}"}}, destination.LoadOptions{LookupEnv: env(map[string]string{"T": "tok"})})
	require.NoError(t, err)
	require.Equal(t, "crm", h.Name())
	require.NoError(t, h.Close())

	_, err = destination.NewHTTP(destination.HTTPConfig{Name: "crm"}, destination.LoadOptions{})
	require.ErrorContains(t, err, "destination crm: url: is required")
	require.ErrorContains(t, err, "destination crm: ref: is required")
}

func TestSetRules(t *testing.T) {
	t.Parallel()
	a := &stubDest{name: "a"}
	_, err := destination.NewSet(a, &stubDest{name: "a"})
	require.ErrorContains(t, err, "configured twice")
	_, err = destination.NewSet(&stubDest{name: "x@y"})
	require.ErrorContains(t, err, "personal data")
	_, err = destination.NewSet(&stubDest{name: "a", caps: destination.Capabilities{Lookup: &destination.Lookup{}}})
	require.ErrorContains(t, err, "declares a lookup but has no Lookup method")
	_, err = destination.NewSet(&stubDest{name: "a", caps: destination.Capabilities{IdempotencyKey: &destination.IdempotencyKey{Header: "K"}}})
	require.ErrorContains(t, err, "retention must be positive")
	s, err := destination.NewSet(a)
	require.NoError(t, err)
	require.Equal(t, 1, s.Len())
	require.Empty(t, s.RetryPolicies())
	_, ok := s.Get("b")
	require.False(t, ok)
}

type stubDest struct {
	name string
	caps destination.Capabilities
}

func (s *stubDest) Name() string                           { return s.name }
func (s *stubDest) Capabilities() destination.Capabilities { return s.caps }
func (s *stubDest) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, nil
}

// TestLoadRefusesEmptyFields: a field written without a value (a key
// alone, ~ or null) decodes as if it were left out, which for these
// means something other than the file seems to say: no tenants list
// serves every tenant, an empty section declares nothing. Each is refused
// at its line, saying what to write instead.
func TestLoadRefusesEmptyFields(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	lookup := "    lookup:\n      url: https://crm.example.com/x\n      match: [{record: /a, payload: /a}]\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"tenants", base + "    tenants:\n", "line 5: destination crm: tenants: has no value, which would serve every tenant"},
		{"tenants ~", base + "    tenants: ~\n", "line 5: destination crm: tenants: has no value, which would serve every tenant"},
		{"tenants null", base + "    tenants: null\n", "line 5: destination crm: tenants: has no value, which would serve every tenant"},
		{"unique_reference", base + "    unique_reference:\n" + lookup,
			"line 5: destination crm: unique_reference: has no value: write unique_reference: {} to declare it with the default conflict_status 409"},
		{"idempotency", base + "    idempotency:\n", "line 5: destination crm: idempotency: has no value: it needs retention and a header"},
		{"lookup", base + "    lookup: ~\n", "line 5: destination crm: lookup: has no value: it needs url and match"},
		{"retry", base + "    retry:\n", "line 5: destination crm: retry: has no value: write retry: {} for the default policy"},
		{"lookup.results", base + "    lookup:\n      url: https://crm.example.com/x\n      results:\n      match: [{record: /a, payload: /a}]\n",
			`line 7: destination crm: lookup.results: has no value: write results: "" for an answer that is itself the array`},
		{"lookup.not_found", base + "    lookup:\n      url: https://crm.example.com/x\n      not_found:\n      match: [{record: /a, payload: /a}]\n",
			"line 7: destination crm: lookup.not_found: has no value: it needs field and value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := destination.Load([]byte(tc.yaml), destination.LoadOptions{})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}

	// Written out, the same sections load: {} takes the defaults.
	set, err := destination.Load([]byte(base+"    unique_reference: {}\n    retry: {}\n"+lookup), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	require.Equal(t, &destination.UniqueReference{ConflictStatus: 409}, crm.Capabilities().UniqueReference)
	require.Equal(t, opledger.DefaultRetryPolicy, set.RetryPolicies()["crm"])
}

// TestLoadRefusesClientHeaders: headers the HTTP client sets or manages
// cannot be configured, in headers or as the idempotency key's header: an
// Accept-Encoding of the file's would turn off the client's transparent
// gzip, so that a compressed answer could not be read and every success
// would be uncertain; a key in Host, Content-Length or a hop-by-hop
// header would never be sent as set.
func TestLoadRefusesClientHeaders(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	for _, name := range []string{"Host", "Content-Length", "Accept-Encoding", "accept-encoding", "Transfer-Encoding", "Trailer",
		"Connection", "Upgrade", "TE", "Keep-Alive", "Proxy-Connection"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := destination.Load([]byte(base+"    headers:\n      "+name+": x\n"), destination.LoadOptions{})
			require.ErrorContains(t, err, "line 6: destination crm: headers."+name+": is ")
			require.ErrorContains(t, err, "by the HTTP client")

			_, err = destination.Load([]byte(base+"    lookup:\n      url: https://crm.example.com/x\n      headers:\n        "+name+": x\n"+
				"      match: [{record: /a, payload: /a}]\n"), destination.LoadOptions{})
			require.ErrorContains(t, err, "line 8: destination crm: lookup.headers."+name+": is ")

			_, err = destination.Load([]byte(base+"    idempotency:\n      header: "+name+"\n      retention: 24h\n"), destination.LoadOptions{})
			require.ErrorContains(t, err, "line 6: destination crm: idempotency.header: is ")
			require.ErrorContains(t, err, "the key needs a header of its own, e.g. Idempotency-Key")

			_, err = destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "https://crm.example.com/x", Ref: "/id",
				Idempotency: &destination.IdempotencyConfig{Header: name, Retention: destination.Duration(time.Hour)}}, destination.LoadOptions{})
			require.ErrorContains(t, err, "destination crm: idempotency.header: is ")
		})
	}
	_, err := destination.Load([]byte(base+"    headers:\n      Accept-Encoding: gzip\n"), destination.LoadOptions{})
	require.ErrorContains(t, err, "decompresses a gzip answer itself")
	// Two values keep what the client does, and load.
	set, err := destination.Load([]byte(base+"    headers:\n      Accept-Encoding: identity\n      Connection: close\n"), destination.LoadOptions{})
	require.NoError(t, err)
	require.NoError(t, set.Close())
}

// TestHTTPCallGzipAnswer: the HTTP client asks for gzip and decompresses
// the answer itself, so a destination that compresses its answers (behind
// nginx, say) is read as any other.
func TestHTTPCallGzipAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			http.Error(w, "gzip expected", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, `{"id": "r-1"}`)
		_ = zw.Close()
	}))
	t.Cleanup(srv.Close)
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id"})
	res, err := h.Call(context.Background(), call(operation("k1", `{}`)))
	require.NoError(t, err)
	require.Equal(t, "r-1", res.Ref)
	require.JSONEq(t, `{"id": "r-1"}`, string(res.Response))
}

// TestLoadRefusesURLsThatNeverParse: a URL template is tried at load as a
// request's URL is parsed when it is sent, so that a literal part no
// operation can make a URL of is refused at its line, not every
// operation at its send.
func TestLoadRefusesURLsThatNeverParse(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"https://crm.example.com:port/x":       `is not a URL: invalid port ":port" after host`,
		"https://crm example.com/x":            `is not a URL: invalid character " " in host name`,
		"https://crm.example.com:99999/x":      "is not a URL: port 99999 is not one from 1 to 65535",
		"https://crm.example.com:0/x":          "is not a URL: port 0 is not one from 1 to 65535",
		"https://[::1/x":                       `is not a URL: missing ']' in host`,
		"https://crm.example.com/%zz/{{.Key}}": `is not a URL: invalid URL escape "%zz"`,
	} {
		_, err := destination.Load([]byte("destinations:\n  - name: crm\n    url: "+url+"\n    ref: /id\n"), destination.LoadOptions{})
		require.EqualError(t, err, "line 3: destination crm: url: "+want, url)

		_, err = destination.Load([]byte("destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"+
			"    lookup:\n      url: "+url+"\n      match: [{record: /a, payload: /a}]\n"), destination.LoadOptions{})
		require.EqualError(t, err, "line 6: destination crm: lookup.url: "+want, url)
	}
	// What parses loads: a space in the path is sent escaped, and what
	// the payload fills is the payload's.
	for _, url := range []string{"https://crm.example.com/a b/{{.Key}}", "https://crm.example.com:8443/x/{{pathescape .Payload.id}}?q={{urlquery .Payload.q}}",
		"http://[::1]:8080/x", "https://crm.example.com/%41/{{.Payload.id}}",
		// A printf of fields the sample lacks renders %!s(<nil>): the
		// literal text is what is checked.
		`https://crm.example.com/items/{{printf "%s-%s" .Payload.series .Payload.number}}`, "https://crm.example.com/x%{{.Payload.hex}}"} {
		set, err := destination.Load([]byte("destinations:\n  - name: crm\n    url: "+url+"\n    ref: /id\n"), destination.LoadOptions{})
		require.NoError(t, err, url)
		require.NoError(t, set.Close())
	}
}

// TestLoadRefusesUnsendableHeaderValues: a header value that holds a byte
// no HTTP field value may (a control character other than a tab, a line
// break) would fail every call; it is refused at load, the error naming
// the header and the variable it came from, never the value.
func TestLoadRefusesUnsendableHeaderValues(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n    headers:\n"
	vars := env(map[string]string{"TOK": "s3cret\x01tok", "DEL": "s3cret\x7ftok", "NL": "s3cret\ntok", "OK": "s3cret\ttok-é"})
	for header, want := range map[string]string{
		"Authorization: Bearer ${TOK}":    "line 6: destination crm: headers.Authorization: the value of environment variable TOK contains a control character, which no HTTP header value may hold",
		"X-Api-Key: ${OK}-${DEL}":         "line 6: destination crm: headers.X-Api-Key: the value of environment variable DEL contains a control character",
		"Authorization: Bearer ${NL}":     "line 6: destination crm: headers.Authorization: the value of environment variable NL contains a line break",
		`X-Source: "opledger\x01"`:        "line 6: destination crm: headers.X-Source: the value contains a control character",
		`X-Source: "opledger\x7f"`:        "line 6: destination crm: headers.X-Source: the value contains a control character",
		`X-Source: "opledger\u0085${OK}"`: "", // obs-text, and a tab, are field content
	} {
		set, err := destination.Load([]byte(base+"      "+header+"\n"), destination.LoadOptions{LookupEnv: vars})
		if want == "" {
			require.NoError(t, err, header)
			require.NoError(t, set.Close())
			continue
		}
		require.ErrorContains(t, err, want, header)
		require.Len(t, strings.Split(err.Error(), "\n"), 1)
		require.NotContains(t, err.Error(), "s3cret")
	}
	_, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "https://crm.example.com/x", Ref: "/id",
		Headers: map[string]string{"Authorization": "Bearer ${TOK}"}}, destination.LoadOptions{LookupEnv: vars})
	require.EqualError(t, err, "destination crm: headers.Authorization: the value of environment variable TOK contains a control character, which no HTTP header value may hold")
}

// TestLoadRefusesEnvRefInBody: ${NAME} is expanded in headers only; in a
// body it would be sent as written (a secret meant for it, by name, to
// the destination), so it is refused there as in url. A literal ${ is
// written as a template action.
func TestLoadRefusesEnvRefInBody(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	_, err := destination.Load([]byte(base+`    body: '{"api_key": "${API_KEY}", "n": {{json .Payload.n}}}'`+"\n"),
		destination.LoadOptions{LookupEnv: env(map[string]string{"API_KEY": "k-123456"})})
	require.ErrorContains(t, err, "line 5: destination crm: body: ${API_KEY} would be sent as written: environment references are only expanded in headers, where secrets belong")
	require.NotContains(t, err.Error(), "k-123456")

	_, err = destination.Load([]byte(base+"    lookup:\n      method: POST\n      url: https://crm.example.com/search\n"+
		`      body: '{"key": "${API_KEY}"}'`+"\n      match: [{record: /a, payload: /a}]\n"), destination.LoadOptions{})
	require.ErrorContains(t, err, "line 8: destination crm: lookup.body: ${API_KEY} would be sent as written")

	c := &capture{status: 201, answer: `{"id": "r1"}`}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id", Body: `{"greeting": "Hello {{"${"}}name}"}`})
	_, err = h.Call(context.Background(), call(operation("k1", `{}`)))
	require.NoError(t, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, `{"greeting": "Hello ${name}"}`, c.body)
}

// TestLoadRefusesHeaderSpeltTwice: header names are the same in any
// case, so two spellings of one under headers would send only one of
// their values; the file is refused at the line of one, naming the other.
func TestLoadRefusesHeaderSpeltTwice(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"A": "token-aaa", "B": "token-bbb"})
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	_, err := destination.Load([]byte(base+"    headers:\n      Authorization: Bearer ${A}\n      authorization: Bearer ${B}\n"), destination.LoadOptions{LookupEnv: vars})
	require.EqualError(t, err, "line 7: destination crm: headers.authorization: is the header Authorization too (header names are the same in any case), and only one of the two would be sent: keep one")
	require.NotContains(t, err.Error(), "token-")

	_, err = destination.Load([]byte(base+"    lookup:\n      url: https://crm.example.com/x\n      headers:\n        X-Region: eu\n        x-region: us\n"+
		"      match: [{record: /a, payload: /a}]\n"), destination.LoadOptions{})
	require.ErrorContains(t, err, "line 9: destination crm: lookup.headers.x-region: is the header X-Region too")

	// A lookup's header still replaces the destination's of the same name.
	set, err := destination.Load([]byte(base+"    headers:\n      X-Region: eu\n    lookup:\n      url: https://crm.example.com/x\n      headers:\n        x-region: us\n"+
		"      match: [{record: /a, payload: /a}]\n"), destination.LoadOptions{})
	require.NoError(t, err)
	require.NoError(t, set.Close())
}

// TestLoadRefusesZeroTimeout: a file's timeout of 0s, or one written
// without a value, is refused rather than taken as the default 10s; the
// default is had by leaving the field out.
func TestLoadRefusesZeroTimeout(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	for _, v := range []string{" 0s", " 0ms", " 0h0m", "", " ~"} {
		_, err := destination.Load([]byte(base+"    timeout:"+v+"\n"), destination.LoadOptions{})
		require.ErrorContains(t, err, "line 5: destination crm: timeout: ", v)
		require.ErrorContains(t, err, "a timeout must be above 0; leave it out for the default 10s", v)
	}
	set, err := destination.Load([]byte(base), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	require.Equal(t, destination.DefaultTimeout, crm.(destination.Timed).Timeout())
}

// TestLoadRefusesRetryStatusAsConflict: a conflict_status that a
// destination answers to say "try later" (408, 421, 425, 429) would read a
// rate limit as "the record exists" and hold the operation; it is refused
// at load, the error saying why, as a Go destination's Capabilities are.
func TestLoadRefusesRetryStatusAsConflict(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n" +
		"    lookup:\n      url: https://crm.example.com/x\n      match: [{record: /a, payload: /a}]\n"
	for _, status := range []string{"408", "421", "425", "429"} {
		_, err := destination.Load([]byte(base+"    unique_reference: {conflict_status: "+status+"}\n"), destination.LoadOptions{})
		require.ErrorContains(t, err, "line 8: destination crm: unique_reference.conflict_status: "+status+" means \"try again later\"", status)
		err = destination.Capabilities{UniqueReference: &destination.UniqueReference{ConflictStatus: 429}}.Validate()
		require.ErrorContains(t, err, "unique reference conflict status 429 means \"try again later\"")
	}
	for _, status := range []string{"409", "422", "400"} {
		set, err := destination.Load([]byte(base+"    unique_reference: {conflict_status: "+status+"}\n"), destination.LoadOptions{})
		require.NoError(t, err, status)
		require.NoError(t, set.Close())
	}
}

// TestLoadIdempotencyKeyInURL: a destination that takes its idempotency
// key in the URL (PUT …/{{.IdempotencyKey}}) declares idempotency without
// a header; a key in neither the URL nor the body still needs one.
func TestLoadIdempotencyKeyInURL(t *testing.T) {
	t.Parallel()
	set, err := destination.Load([]byte("destinations:\n  - name: crm\n    method: PUT\n"+
		"    url: https://crm.example.com/x/{{.IdempotencyKey}}\n    ref: /id\n    idempotency: {retention: 24h}\n"), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	require.Equal(t, 24*time.Hour, crm.Capabilities().IdempotencyKey.Retention)

	_, err = destination.Load([]byte("destinations:\n  - name: crm\n    url: https://crm.example.com/x/{{.Key}}\n    ref: /id\n"+
		"    idempotency: {retention: 24h}\n"), destination.LoadOptions{})
	require.ErrorContains(t, err, "idempotency.header: is required unless the url or body template sends {{.IdempotencyKey}}")
}

// TestLoadRetryZeroMeansNone: as docs/destinations.md says, a file's
// max_delay of 0s sets no cap on the backoff, and a deadline of 0s none,
// as opledger.RetryPolicy's zero values do.
func TestLoadRetryZeroMeansNone(t *testing.T) {
	t.Parallel()
	set, err := destination.Load([]byte("destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"+
		"    retry: {max_attempts: 20, initial_delay: 1s, max_delay: 0s, deadline: 0s}\n"), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	p := set.RetryPolicies()["crm"]
	require.Zero(t, p.MaxDelay)
	require.Zero(t, p.Deadline)
	require.Equal(t, 262144*time.Second, p.Ceiling(19), "no cap: 1s doubled 18 times, the wait before the 20th attempt")
}

// TestLoadIdempotencyKeyReadByAnAction: without idempotency.header, the
// key must be sent by the url or body template. That was judged by a
// search for ".IdempotencyKey" in their text, so a comment or literal
// text naming it passed, and every call (protected retries included)
// went out without the key. Now only an action that reads the
// operation's field (.IdempotencyKey where dot is the operation, not a
// payload's field of that name inside with; $.IdempotencyKey anywhere;
// in any branch or defined template) counts.
func TestLoadIdempotencyKeyReadByAnAction(t *testing.T) {
	t.Parallel()
	load := func(url, body string) error {
		yaml := "destinations:\n  - name: crm\n    method: PUT\n    url: '" + url + "'\n    ref: /id\n    idempotency: {retention: 24h}\n"
		if body != "" {
			yaml += "    body: '" + body + "'\n"
		}
		set, err := destination.Load([]byte(yaml), destination.LoadOptions{})
		if err == nil {
			require.NoError(t, set.Close())
		}
		return err
	}
	const missing = "idempotency.header: is required unless the url or body template sends {{.IdempotencyKey}}"
	for _, c := range [][2]string{
		{"https://crm.example.com/x/{{.Key}}", `{"ref": {{json .Key}}}{{/* .IdempotencyKey goes in a header */}}`},
		{"https://crm.example.com/x/{{.Key}}?note=.IdempotencyKey", ""},
		{"https://crm.example.com/x/{{.Key}}", `{"note": {{json ".IdempotencyKey"}}}`},
		{"https://crm.example.com/x/{{.Key}}", `{"key": {{with .Payload}}{{json .IdempotencyKey}}{{end}}}`},
	} {
		require.ErrorContains(t, load(c[0], c[1]), missing, c)
	}
	for _, c := range [][2]string{
		{"https://crm.example.com/x/{{.IdempotencyKey}}", ""},
		{"https://crm.example.com/x/{{urlquery .Key}}?k={{urlquery $.IdempotencyKey}}", ""},
		{"https://crm.example.com/x", `{"key": {{with .Payload}}{{json $.IdempotencyKey}}{{end}}}`},
		{"https://crm.example.com/x", `{{define "k"}}{{json .IdempotencyKey}}{{end}}{"key": {{template "k" .}}}`},
	} {
		require.NoError(t, load(c[0], c[1]), c)
	}
}
