package fakedest_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/opledger/opledger/internal/fakedest"
)

// searchItems asks the fake destination's search for query and returns
// the items it answered.
func searchItems(t *testing.T, s *fakedest.Server, query string) []map[string]any {
	t.Helper()
	resp, err := http.Get(s.URL() + "/records" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /records%s: status %d", query, resp.StatusCode)
	}
	var body struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Items
}

// A search for an empty external_ref (or none at all) names no record:
// records created without an external_ref are not found by it, as a
// lookup for an operation's empty reference must not find another's
// record.
func TestSearchEmptyExternalRefFindsNothing(t *testing.T) {
	s := fakedest.New(t, fakedest.Options{})
	s.Put("", map[string]any{"amount": 1})
	s.Put("", map[string]any{"amount": 2})
	s.Put("ref-1", map[string]any{"amount": 3})
	for _, q := range []string{"?external_ref=", ""} {
		if items := searchItems(t, s, q); len(items) != 0 {
			t.Errorf("GET /records%s answered %d items, want none", q, len(items))
		}
	}
	items := searchItems(t, s, "?external_ref=ref-1")
	if len(items) != 1 || items[0]["external_ref"] != "ref-1" {
		t.Errorf("GET /records?external_ref=ref-1 answered %v, want the one record", items)
	}
}
