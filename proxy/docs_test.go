package proxy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proxy"
)

// Every configuration file shown in docs/proxy.md loads and builds.
func TestDocsConfigExamplesLoad(t *testing.T) {
	t.Setenv("CRM_LOOKUP_TOKEN", "x")
	doc, err := os.ReadFile("../docs/proxy.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```(?:yaml|sh)\n(.*?)```").FindAllSubmatch(doc, -1)
	n := 0
	for _, b := range blocks {
		text := string(b[1])
		if i := strings.Index(text, "$ cat proxy.yaml\n"); i >= 0 {
			text = text[i+len("$ cat proxy.yaml\n"):]
			text = text[:strings.Index(text, "\n$ ")+1]
		} else if !strings.HasPrefix(text, "tenant:") && !strings.HasPrefix(text, "upstreams:") {
			continue
		}
		n++
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		c, err := proxy.LoadConfig(path)
		require.NoError(t, err, "example %d:\n%s", n, text)
		_, err = proxy.RetryPolicies(c.Upstreams)
		require.NoError(t, err, "example %d:\n%s", n, text)
	}
	require.Equal(t, 2, n, "the reference file and the session's file")
}
