package destination

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPointer(t *testing.T) {
	t.Parallel()
	doc, err := decodeJSON([]byte(`{"a": {"b/c": [10, {"m~n": "x"}], "": 1}, "id": 7}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		ptr  string
		want any
		ok   bool
	}{
		{"/id", "7", true},
		{"/a/b~1c/0", "10", true},
		{"/a/b~1c/1/m~0n", "x", true},
		{"/a/", "1", true},
		{"/a/b~1c/2", nil, false},
		{"/a/b~1c/01", nil, false},
		{"/a/b~1c/-", nil, false},
		{"/nope", nil, false},
		{"/id/x", nil, false},
	} {
		p, err := parsePointer(tc.ptr)
		require.NoError(t, err, tc.ptr)
		v, ok := p.get(doc)
		require.Equal(t, tc.ok, ok, tc.ptr)
		if ok {
			s, _ := scalarString(v)
			require.Equal(t, tc.want, s, tc.ptr)
		}
	}
	p, err := parsePointer("")
	require.NoError(t, err)
	v, ok := p.get(doc)
	require.True(t, ok)
	require.Equal(t, doc, v)
	for _, bad := range []string{"id", "/a~", "/a~2"} {
		_, err := parsePointer(bad)
		require.Error(t, err, bad)
	}
}

func TestJSONEqual(t *testing.T) {
	t.Parallel()
	dec := func(s string) any {
		v, err := decodeJSON([]byte(s))
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`2`, `2.0`, true},
		{`2`, `2e0`, true},
		{`9007199254740993`, `9007199254740992`, false},
		{`"2"`, `2`, false},
		{`{"a": [1, "x", null, true]}`, `{"a": [1.0, "x", null, true]}`, true},
		{`{"a": 1}`, `{"a": 1, "b": 2}`, false},
		{`[1, 2]`, `[2, 1]`, false},
		{`null`, `false`, false},
	} {
		require.Equal(t, tc.want, jsonEqual(dec(tc.a), dec(tc.b)), "%s vs %s", tc.a, tc.b)
	}
	_, err := decodeJSON([]byte(`1 2`))
	require.Error(t, err)
}
