package proxy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// parseKey reads the draft's sf-string, with escapes and parameters, and
// the bare keys many clients send; each refusal says what is wrong.
func TestParseKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", proxy.MaxKeyLength)
	for _, c := range []struct {
		name   string
		values []string
		key    string // when accepted
		err    string // a part of the refusal
	}{
		{name: "bare", values: []string{"order-99"}, key: "order-99"},
		{name: "quoted", values: []string{`"order-99"`}, key: "order-99"},
		{name: "uuid", values: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, key: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "surrounding space", values: []string{`  "k"  `}, key: "k"},
		{name: "bare with space", values: []string{"order 99"}, key: "order 99"},
		{name: "bare with semicolon is taken whole", values: []string{"abc;p=1"}, key: "abc;p=1"},
		{name: "longest bare", values: []string{long}, key: long},
		{name: "longest quoted", values: []string{`"` + long + `"`}, key: long},
		{name: "quoted comma is part of the key", values: []string{`"a,b"`}, key: "a,b"},
		{name: "quoted semicolon is part of the key", values: []string{`"a;p=1"`}, key: "a;p=1"},
		{name: "escaped quote", values: []string{`"a\"b"`}, key: `a"b`},
		{name: "escaped backslash", values: []string{`"a\\b"`}, key: `a\b`},
		{name: "parameter", values: []string{`"a";p=1`}, key: "a"},
		{name: "flag parameter", values: []string{`"a";p`}, key: "a"},
		{name: "parameters of every type", values: []string{`"a";i=-12;d=1.5;s="x,y;z\"";t=tok/en:1;b=:aGk=:;f=?0;*at=@1700000000;ds=%"caf%c3%a9"; sp=1`}, key: "a"},
		{name: "parameter then space", values: []string{`"a";p=1 `}, key: "a"},

		{name: "two lines", values: []string{"a", "b"}, err: "2 field lines, which HTTP reads as a list"},
		{name: "two equal lines", values: []string{"a", "a"}, err: "2 field lines"},
		{name: "bare list", values: []string{"a, b"}, err: "comma outside quotes"},
		{name: "bare comma", values: []string{"a,b"}, err: `must be sent quoted ("a,b")`},
		{name: "quoted list", values: []string{`"a", "b"`}, err: "comma outside quotes"},
		{name: "quoted list without space", values: []string{`"a","b"`}, err: "comma outside quotes"},
		{name: "list after parameters", values: []string{`"a";p=1, "b"`}, err: "comma outside quotes"},
		{name: "trailing comma", values: []string{`"a",`}, err: "comma outside quotes"},
		{name: "empty", values: []string{""}, err: "is empty"},
		{name: "blank", values: []string{"   "}, err: "is empty"},
		{name: "empty quoted", values: []string{`""`}, err: "is empty"},
		{name: "empty quoted with parameter", values: []string{`"";p=1`}, err: "is empty"},
		{name: "too long", values: []string{long + "k"}, err: "longer than 255 bytes"},
		{name: "too long quoted", values: []string{`"` + long + `k"`}, err: "longer than 255 bytes"},
		{name: "control byte", values: []string{"k\x7f"}, err: "printable ASCII; it holds the byte 0x7f"},
		{name: "control byte quoted", values: []string{"\"k\x01\""}, err: "printable ASCII; it holds the byte 0x01"},
		{name: "not ASCII", values: []string{"clé"}, err: "printable ASCII; it holds the byte 0xc3"},
		{name: "bare quote", values: []string{`a"b`}, err: "an unquoted Idempotency-Key cannot hold a quote"},
		{name: "bare backslash", values: []string{`a\b`}, err: "an unquoted Idempotency-Key cannot hold a quote (\") or a backslash"},
		{name: "no closing quote", values: []string{`"abc`}, err: "no closing quote"},
		{name: "lone quote", values: []string{`"`}, err: "no closing quote"},
		{name: "escaped closing quote", values: []string{`"abc\"`}, err: "no closing quote"},
		{name: "other escape", values: []string{`"a\nb"`}, err: "a backslash may only escape"},
		{name: "backslash at the end", values: []string{`"a\`}, err: "a backslash may only escape"},
		{name: "text after the quote", values: []string{`"a"b`}, err: "only parameters"},
		{name: "second string", values: []string{`"a" "b"`}, err: "only parameters"},
		{name: "space before parameter", values: []string{`"a" ;p=1`}, err: "right after the quote"},
		{name: "uppercase parameter", values: []string{`"a";P=1`}, err: "a parameter of the Idempotency-Key is malformed"},
		{name: "empty parameter", values: []string{`"a";`}, err: "parameter of the Idempotency-Key is malformed"},
		{name: "parameter without value", values: []string{`"a";p=`}, err: "parameter of the Idempotency-Key is malformed"},
		{name: "bad parameter value", values: []string{`"a";p=1x`}, err: "parameter of the Idempotency-Key is malformed"},
		{name: "unclosed parameter string", values: []string{`"a";p="x`}, err: "parameter of the Idempotency-Key is malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key, err := proxy.ParseKey(c.values)
			if c.err == "" {
				require.NoError(t, err)
				require.Equal(t, c.key, key)
				return
			}
			require.ErrorContains(t, err, c.err)
			require.Empty(t, key)
		})
	}
}

// A list of keys is refused alike in one field line and in two, with a
// problem detail saying so; a quoted key with a parameter is the key
// without it.
func TestKeyListAndParameters(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		for _, values := range [][]string{{"a, b"}, {"a", "b"}, {`"a", "b"`}} {
			a := b.sendWith(t, http.MethodPost, "/records", http.Header{
				"Content-Type": {"application/json"}, "Authorization": {token}, "Idempotency-Key": values,
			}, body1)
			require.Equal(t, http.StatusBadRequest, a.status, "%q", values)
			p := a.problem(t)
			require.Equal(t, httpapi.ProblemTypeBase+"invalid_idempotency_key", p.Type)
			require.Contains(t, p.Detail, "which HTTP reads as a list of keys", "%q", values)
		}
		require.Equal(t, 0, b.up.Creates())
		require.Equal(t, 0, b.count(t))

		first := b.send(t, http.MethodPost, "/records", `"key-1";p=1`, token, body1)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		for _, key := range []string{"key-1", `"key-1"`, `"key-1";v="2, or 3"`} {
			again := b.send(t, http.MethodPost, "/records", key, token, body1)
			require.Equal(t, http.StatusCreated, again.status, "%s", key)
			require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed), "%s is the same key", key)
			require.Equal(t, first.header.Get(proxy.HeaderOperation), again.header.Get(proxy.HeaderOperation))
		}
		require.Equal(t, 1, b.up.Creates())
	})
}

// FuzzParseKey: an accepted key is 1 to MaxKeyLength bytes of printable
// ASCII, and reads the same sent again as an sf-string, with a parameter;
// a field value holding two keys, one line or two, is refused.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k1", `"quoted-key"`, `"a";p=1`, "a, b", `"a,b"`, `"a\"b\\c"`, "abc;p=1", `"a";p="x,y"`, "", "k\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := proxy.ParseKey([]string{v})
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.NotEmpty(t, key)
		require.LessOrEqual(t, len(key), proxy.MaxKeyLength)
		for i := 0; i < len(key); i++ {
			require.True(t, key[i] >= 0x20 && key[i] <= 0x7e, "%q holds %#x", key, key[i])
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		for _, again := range []string{quoted, quoted + ";p=1"} {
			k, err := proxy.ParseKey([]string{again})
			require.NoError(t, err, "%q, the key of %q", again, v)
			require.Equal(t, key, k, "%q, the key of %q", again, v)
		}
		_, err = proxy.ParseKey([]string{v, v})
		require.ErrorContains(t, err, "list of keys")
		_, err = proxy.ParseKey([]string{quoted + ", " + quoted})
		require.ErrorContains(t, err, "list of keys")
	})
}
