package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
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
//
// Paths are relative to the file's directory. Secrets are never in the
// file: it names the environment variables that hold them.
type FileConfig struct {
	Destinations string                   `yaml:"destinations"`
	Rules        string                   `yaml:"rules"`
	Webhooks     map[string]WebhookConfig `yaml:"webhooks"`

	dir string
}

// WebhookConfig configures one webhook source.
type WebhookConfig struct {
	// Tenant receives the source's events.
	Tenant string `yaml:"tenant"`
	// Scheme is "stripe" or "shopify".
	Scheme string `yaml:"scheme"`
	// SecretEnv names the environment variable with the signing secret
	// (several, comma-separated, during a rotation).
	SecretEnv string `yaml:"secret_env"`
	// Header overrides the scheme's signature header.
	Header string `yaml:"header"`
	// Tolerance bounds the age of a Stripe-style timestamp, e.g. "5m".
	Tolerance string `yaml:"tolerance"`
}

// LoadConfig reads and checks a configuration file. Unknown fields are
// errors with their line.
func LoadConfig(path string) (*FileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c FileConfig
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.dir = filepath.Dir(path)
	return &c, nil
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

// APIOptions builds the rules and webhook verifiers the API needs.
func (c *FileConfig) APIOptions() (httpapi.Options, error) {
	var opts httpapi.Options
	if c.Rules != "" {
		rules, err := opledger.LoadRules(c.path(c.Rules))
		if err != nil {
			return opts, fmt.Errorf("config rules: %w", err)
		}
		opts.Rules = rules
	}
	if len(c.Webhooks) > 0 {
		opts.Webhooks = map[string]httpapi.WebhookSource{}
	}
	for name, w := range c.Webhooks {
		if err := opledger.ValidateKey(name); err != nil {
			return opts, fmt.Errorf("config webhooks: source name: %w", err)
		}
		if w.Tenant == "" {
			return opts, fmt.Errorf("config webhooks.%s: tenant is required", name)
		}
		var tol time.Duration
		if w.Tolerance != "" {
			d, err := time.ParseDuration(w.Tolerance)
			if err != nil || d <= 0 {
				return opts, fmt.Errorf("config webhooks.%s: tolerance %q is not a positive duration like 5m", name, w.Tolerance)
			}
			tol = d
		}
		v, err := webhook.New(webhook.Config{Scheme: webhook.Scheme(w.Scheme), SecretEnv: w.SecretEnv, Header: w.Header, Tolerance: tol})
		if err != nil {
			return opts, fmt.Errorf("config webhooks.%s: %w", name, err)
		}
		opts.Webhooks[name] = httpapi.WebhookSource{Tenant: w.Tenant, Verify: v, Scheme: webhook.Scheme(w.Scheme)}
	}
	return opts, nil
}
