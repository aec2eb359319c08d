package server

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/configfile"
	"github.com/opledger/opledger/webhook"
)

// FileConfig is the YAML file given to opledger serve --config:
//
//	destinations: destinations.yaml   # HTTP destinations (docs/destinations.md)
//	rules: rules.yaml                 # event mapping rules (docs/events-and-workflows.md)
//	webhooks:                         # providers posting to /v1/webhooks/{source}
//	  stripe:
//	    tenant: acme
//	    scheme: stripe                # or shopify
//	    secret_env: STRIPE_WEBHOOK_SECRET
//	    tolerance: 5m
//	require_approval: [payments]      # every operation for these waits for approval
//	owners:                           # who decides, for operations recorded without an owner
//	  payments: finance
//
// Paths are relative to the file's directory. Secrets are never in the
// file: it names the environment variables that hold them.
// docs/configuration.md describes every field.
type FileConfig struct {
	Destinations string                   `yaml:"destinations"`
	Rules        string                   `yaml:"rules"`
	Webhooks     map[string]WebhookConfig `yaml:"webhooks"`
	// RequireApproval names the destinations whose every operation waits
	// for an approval before its first attempt, whatever its intent says
	// (opledger.Options.DestinationsRequiringApproval): destinations of
	// the destinations file, or ones that workers of their own send to.
	RequireApproval []string `yaml:"require_approval"`
	// Owners names, per destination, the owner a new operation for it is
	// recorded with when its intent names none
	// (opledger.Options.DestinationOwners).
	Owners map[string]string `yaml:"owners"`

	dir string
	// file is the path LoadConfig was given, and lines the line of each
	// entry of webhooks, owners ("webhooks.NAME", "owners.NAME") and
	// require_approval ("require_approval.N", from 1), for the errors
	// about them (at).
	file  string
	lines map[string]int
	// texts are the files the configuration names, by path, as read once:
	// the text a loader parsed is the text SharedSettings digests.
	texts map[string][]byte
}

// WebhookConfig configures one webhook source.
type WebhookConfig struct {
	// Tenant receives the source's events. Required; key syntax
	// (opledger.ValidateKey).
	Tenant string `yaml:"tenant"`
	// Scheme is "stripe" or "shopify".
	Scheme string `yaml:"scheme"`
	// SecretEnv names the environment variable with the signing secret
	// (several, comma-separated, during a rotation).
	SecretEnv string `yaml:"secret_env"`
	// Header overrides the scheme's signature header (Stripe-Signature,
	// X-Shopify-Hmac-Sha256); an HTTP field name (RFC 9110 token).
	Header string `yaml:"header"`
	// Tolerance bounds the age of a Stripe-style timestamp, e.g. "5m".
	// Default 5m. Refused for shopify, whose signature has no timestamp.
	Tolerance string `yaml:"tolerance"`
}

// LoadConfig reads and checks a configuration file: a regular file of at
// most configfile.MaxSize bytes holding one YAML document. Unknown fields
// are errors with their line. A file with no settings at all (empty, or
// only comments) is refused, naming it: given --config, an operator
// expects its settings to apply, and a truncated or mistaken file would
// otherwise start a server without them, silently. An empty mapping
// ({}) is an empty configuration.
func LoadConfig(path string) (*FileConfig, error) {
	data, err := configfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var c FileConfig
	if err := configfile.DecodeYAML(data, &c); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s holds no settings (it is empty or only comments): write its settings, or leave --config out to serve without one", path)
	} else if err != nil {
		if hint := fileGivenForConfig(data, path); hint != "" {
			return nil, fmt.Errorf("config %s: %s", path, hint)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.file, c.lines = path, entryLines(data)
	// Absolute, so that an error about a file it names says where that
	// file was looked for.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	c.dir = filepath.Dir(path)
	return &c, nil
}

// fileGivenForConfig recognizes a destinations file or a rules file given
// where the configuration file that names it belongs, or a configuration
// file that holds the destinations or rules themselves (their top-level
// destinations or rules is a list, where the configuration file's is a
// path), and says so; "" for anything else. The advice never names the
// file given as the one to name in it: the entries go into a file of
// their own.
func fileGivenForConfig(data []byte, path string) string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return ""
	}
	top := doc.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		key, value := top[i], top[i+1]
		if value.Kind != yaml.SequenceNode {
			continue
		}
		var what, guide string
		switch key.Value {
		case "destinations":
			what, guide = "destinations", "docs/destinations.md"
		case "rules":
			what, guide = "rules", "docs/events-and-workflows.md"
		default:
			continue
		}
		name := filepath.Base(path)
		if len(top) == 2 && strings.TrimSuffix(name, filepath.Ext(name)) != "opledger" {
			// Holding the list and nothing else, and not named as the
			// configuration file is (opledger.yaml): the list's own file,
			// whatever its name, given to --config.
			return fmt.Sprintf("line %d: %s: holds a list, so %s is a %s file (%s); --config takes the configuration file that names it: give --config a file such as opledger.yaml holding the line \"%s: %s\" (docs/configuration.md)",
				key.Line, key.Value, name, what, guide, key.Value, name)
		}
		// A configuration file with the list written inline: the entries
		// move to a file of their own, which it names.
		own := key.Value + ".yaml"
		if own == name {
			own = "my-" + own
		}
		return fmt.Sprintf("line %d: %s: holds the %s themselves, but in the file given to --config %s names the file that holds them: move these entries into a file of their own, such as %s (%s), and write the line \"%s: %s\" here in their place (docs/configuration.md)",
			key.Line, key.Value, what, key.Value, own, guide, key.Value, own)
	}
	return ""
}

// entryLines finds the line of each entry of webhooks, owners and
// require_approval in the file's text (FileConfig.lines).
func entryLines(data []byte) map[string]int {
	lines := map[string]int{}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return lines
	}
	top := root.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		key, value := top[i].Value, top[i+1]
		switch {
		case (key == "webhooks" || key == "owners") && value.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(value.Content); j += 2 {
				lines[key+"."+value.Content[j].Value] = value.Content[j].Line
			}
		case key == "require_approval" && value.Kind == yaml.SequenceNode:
			for j, entry := range value.Content {
				lines[key+"."+strconv.Itoa(j+1)] = entry.Line
			}
		}
	}
	return lines
}

// at begins an error about the entry named entry ("webhooks.stripe",
// "require_approval.2"): "config FILE: line N: ", or "config " for a
// FileConfig LoadConfig did not read.
func (c *FileConfig) at(entry string) string {
	if c.file == "" {
		return "config "
	}
	if line := c.lines[entry]; line > 0 {
		return fmt.Sprintf("config %s: line %d: ", c.file, line)
	}
	return fmt.Sprintf("config %s: ", c.file)
}

func (c *FileConfig) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.dir, p)
}

// DestinationsPath is the destinations file, resolved against the config
// file's directory; empty when none is configured.
func (c *FileConfig) DestinationsPath() string { return c.path(c.Destinations) }

// read returns the text of a file the configuration names, read at the
// first call for its path (configfile.Read: a regular file of bounded
// size) and kept, so that every use of it sees the same text.
func (c *FileConfig) read(p string) ([]byte, error) {
	if b, ok := c.texts[p]; ok {
		return b, nil
	}
	b, err := configfile.Read(p)
	if err != nil {
		return nil, err
	}
	if c.texts == nil {
		c.texts = map[string][]byte{}
	}
	c.texts[p] = b
	return b, nil
}

// LoadDestinations reads and builds the destinations file the
// configuration names (destination.Load); nil when it names none. Its
// errors read as destination.LoadFile's.
func (c *FileConfig) LoadDestinations(opts destination.LoadOptions) (*destination.Set, error) {
	p := c.DestinationsPath()
	if p == "" {
		return nil, nil
	}
	b, err := c.read(p)
	if err != nil {
		return nil, fmt.Errorf("read destinations: %w", err)
	}
	set, err := destination.Load(b, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return set, nil
}

// DestinationLine is the line of the destinations file the configuration
// names on which destination name's timeout is written, or its entry
// begins when it gives none; 0 when it cannot be found (no destinations
// file, not read yet, or no such entry).
func (c *FileConfig) DestinationLine(name string) int {
	b, ok := c.texts[c.DestinationsPath()]
	if !ok {
		return 0
	}
	var root yaml.Node
	if yaml.Unmarshal(b, &root) != nil || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return 0
	}
	top := root.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		if top[i].Value != "destinations" || top[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, entry := range top[i+1].Content {
			if entry.Kind != yaml.MappingNode {
				continue
			}
			named, line := false, entry.Line
			for j := 0; j+1 < len(entry.Content); j += 2 {
				switch entry.Content[j].Value {
				case "name":
					named = entry.Content[j+1].Value == name
				case "timeout":
					line = entry.Content[j].Line
				}
			}
			if named {
				return line
			}
		}
	}
	return 0
}

// SharedSettings returns, for Config.Settings, the text of the files the
// configuration names whose effect every process sharing a store must
// have (docs/scaling.md): destinations_file and rules_file, empty when
// the configuration names none. Each file is read once: the text is the
// one LoadDestinations and APIOptions parsed, when they ran first. A
// server without a configuration file announces both empty
// (NoSharedSettings), so that it differs from one with the files.
func (c *FileConfig) SharedSettings() (map[string]string, error) {
	out := NoSharedSettings()
	for name, p := range map[string]string{"destinations_file": c.DestinationsPath(), "rules_file": c.path(c.Rules)} {
		if p == "" {
			continue
		}
		b, err := c.read(p)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", strings.TrimSuffix(name, "_file"), err)
		}
		out[name] = string(b)
	}
	return out, nil
}

// NoSharedSettings are the SharedSettings of a server started without a
// configuration file.
func NoSharedSettings() map[string]string {
	return map[string]string{"destinations_file": "", "rules_file": ""}
}

// keyReason is why ValidateKey refuses name, without repeating it (a key,
// a tenant or a destination name may hold what must not be shown); ""
// when it takes it.
func keyReason(name string) string {
	err := opledger.ValidateKey(name)
	if err == nil {
		return ""
	}
	var ke *opledger.KeyError
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return err.Error()
}

// ApprovalDestinations returns require_approval's destinations for
// opledger.Options.DestinationsRequiringApproval, each checked for the
// syntax of a destination name, so that a command can refuse a bad entry
// before it opens, and perhaps creates, the ledger. Like a key, a bad
// entry is not repeated: the error names its position.
func (c *FileConfig) ApprovalDestinations() ([]string, error) {
	for i, name := range c.RequireApproval {
		if reason := keyReason(name); reason != "" {
			return nil, fmt.Errorf("%srequire_approval: entry %d takes a destination name, in the operation key syntax: %s", c.at("require_approval."+strconv.Itoa(i+1)), i+1, reason)
		}
	}
	return slices.Clone(c.RequireApproval), nil
}

// DestinationOwners returns owners for
// opledger.Options.DestinationOwners, checked as Open would check them
// (each destination name in the key syntax, each owner non-empty text
// of at most 200 bytes), so that a command can refuse a bad entry before
// it opens, and perhaps creates, the ledger. Entries are checked in the
// order of their names; a bad destination name is not repeated.
func (c *FileConfig) DestinationOwners() (map[string]string, error) {
	names := slices.Sorted(maps.Keys(c.Owners))
	for _, name := range names {
		if reason := keyReason(name); reason != "" {
			return nil, fmt.Errorf("%sowners: a destination name takes the operation key syntax: %s", c.at("owners."+name), reason)
		}
		owner := c.Owners[name]
		if strings.TrimSpace(owner) == "" {
			return nil, fmt.Errorf("%sowners.%s: names no owner: give a team or an on-call handle, or leave the destination out", c.at("owners."+name), name)
		}
		if err := opledger.CheckOwner(owner); err != nil {
			return nil, fmt.Errorf("%sowners.%s: %s", c.at("owners."+name), name, opledger.InvalidInputDetail(err))
		}
	}
	return maps.Clone(c.Owners), nil
}

// DestinationNameWarnings returns a warning for each require_approval
// entry and owners name that is not a destination of set (the
// destinations file's) but only the case or one letter off one that is:
// the setting then applies only to operations recorded for the name as
// written, which may be a worker's own destination, and the destination
// meant runs without it. Nil without a set.
func (c *FileConfig) DestinationNameWarnings(set *destination.Set) []string {
	if set == nil {
		return nil
	}
	names := set.Names()
	var out []string
	check := func(entry, what, name string) {
		if slices.Contains(names, name) {
			return
		}
		meant := ""
		for _, n := range names {
			if strings.EqualFold(n, name) || configfile.EditDistance(n, name) == 1 {
				if meant != "" {
					return // two near: which is meant cannot be told
				}
				meant = n
			}
		}
		if meant != "" {
			out = append(out, fmt.Sprintf("%s%s: %q is not a destination of %s, did you mean %q? As written, it applies only to operations recorded for %q",
				c.at(entry), what, name, c.DestinationsPath(), meant, name))
		}
	}
	for i, name := range c.RequireApproval {
		check("require_approval."+strconv.Itoa(i+1), "require_approval", name)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Owners)) {
		check("owners."+name, "owners", name)
	}
	return out
}

// APIOptions builds the rules and webhook verifiers the API needs. It
// checks everything httpapi.New would (a webhook's tenant too), so that a
// command can refuse a bad file before it opens, and perhaps creates, the
// ledger. Webhook sources are checked in the order of their names.
func (c *FileConfig) APIOptions() (httpapi.Options, error) {
	var opts httpapi.Options
	if c.Rules != "" {
		// As opledger.LoadRules, from the text read once.
		p := c.path(c.Rules)
		b, err := c.read(p)
		if err != nil {
			return opts, fmt.Errorf("config rules: read rules: %w", err)
		}
		rules, err := opledger.ParseRules(b)
		if err != nil {
			return opts, fmt.Errorf("config rules: %s: %w", p, err)
		}
		opts.Rules = rules
	}
	if len(c.Webhooks) > 0 {
		opts.Webhooks = map[string]httpapi.WebhookSource{}
	}
	names := make([]string, 0, len(c.Webhooks))
	for name := range c.Webhooks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		w, at := c.Webhooks[name], c.at("webhooks."+name)
		if err := opledger.ValidateKey(name); err != nil {
			return opts, fmt.Errorf("%swebhooks: source name: %w", at, err)
		}
		if w.Tenant == "" {
			return opts, fmt.Errorf("%swebhooks.%s: tenant is required", at, name)
		}
		if reason := keyReason(w.Tenant); reason != "" {
			// Like a key, the value is not repeated.
			return opts, fmt.Errorf("%swebhooks.%s: tenant takes a name in the operation key syntax: %s", at, name, reason)
		}
		if w.Header != "" && !destination.ValidHeaderName(w.Header) {
			return opts, fmt.Errorf("%swebhooks.%s: header %q is not an HTTP header name", at, name, w.Header)
		}
		if w.Tolerance != "" && webhook.Scheme(w.Scheme) == webhook.SchemeShopify {
			return opts, fmt.Errorf("%swebhooks.%s: tolerance is for the stripe scheme; a shopify signature carries no timestamp", at, name)
		}
		var tol time.Duration
		if w.Tolerance != "" {
			d, err := time.ParseDuration(w.Tolerance)
			if err != nil || d <= 0 {
				return opts, fmt.Errorf("%swebhooks.%s: tolerance %q is not a positive duration like 5m", at, name, w.Tolerance)
			}
			tol = d
		}
		v, err := webhook.New(webhook.Config{Scheme: webhook.Scheme(w.Scheme), SecretEnv: w.SecretEnv, Header: w.Header, Tolerance: tol})
		if err != nil {
			return opts, fmt.Errorf("%swebhooks.%s: %w", at, name, err)
		}
		opts.Webhooks[name] = httpapi.WebhookSource{Tenant: w.Tenant, Verify: v, Scheme: webhook.Scheme(w.Scheme)}
	}
	return opts, nil
}
