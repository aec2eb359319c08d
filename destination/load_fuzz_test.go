package destination_test

import (
	"strings"
	"testing"

	"github.com/opledger/opledger/destination"
)

// FuzzLoad loads arbitrary destination files with arbitrary values in
// the environment variables they reference: Load never panics, and its
// errors never repeat a resolved value (resolved values are kept out of
// every error and log).
func FuzzLoad(f *testing.F) {
	f.Add(exampleYAML, "crm-s3cret-value")
	f.Add(exampleYAML, "line\nbreak-s3cret")
	f.Add(exampleYAML, "nul\x00s3cret-value")
	f.Add(exampleYAML, "")
	f.Add("destinations:\n  - name: a\n    url: http://127.0.0.1:1/${CRM_TOKEN}\n    headers: {X-K: \"${CRM_TOKEN}${CRM_TOKEN}\"}\n", "v a l u e s3cret")
	f.Add("destinations:\n  - name: a\n    url: http://127.0.0.1:1/x\n    headers: {\"${CRM_TOKEN}\": v}\n", "s3cret-name")
	f.Add("destinations: [{name: a, url: 'http://x', body: '{{.Payload.${CRM_TOKEN}}}'}]", "}}{{s3cret")
	f.Fuzz(func(t *testing.T, doc, value string) {
		secret := "S3cr3t:" + value
		vars := map[string]string{"CRM_TOKEN": secret, "TICKETS_KEY": secret + "-tk", "MAIL_BASIC": secret + "-mail"}
		set, err := destination.Load([]byte(doc), destination.LoadOptions{LookupEnv: env(vars)})
		if err == nil {
			_ = set.Close()
			return
		}
		for _, v := range vars {
			if strings.Contains(err.Error(), v) && !strings.Contains(doc, v) {
				t.Fatalf("the error repeats a resolved value: %v", err)
			}
		}
	})
}
