package proxy

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/redact"
)

// maxUnstoredText bounds a body kept whole for masking (a text body): a
// reference or an error that repeats a longer body whole is unlikely,
// and each spelling of it would be looked for in every text shown.
const maxUnstoredText = 4 << 10

// unstoredContent is, for the ledger to mask as the payload's sensitive
// fields are but never show (internal/maskonly), what of a request the
// payload does not hold value by value: the path's segments that read as
// data and the query's values (the payload keeps each as one text) and,
// when the body is not kept (it is not JSON the fingerprint can
// canonicalize), its values: those of a form, the strings and numbers of
// JSON, or a text body whole. An upstream may make its reference of any of
// them (a customer record named after the address the form sent), and the
// reference is shown wherever the operation is. They go under "path",
// "query" and "body", the payload's sensitive fields of the same names;
// nil when there is nothing to add.
func unstoredContent(r *http.Request, body []byte, bodyKept bool) json.RawMessage {
	doc := map[string]any{}
	if segs := pathSegments(r.URL.Path); segs != nil {
		doc["path"] = map[string]any{"segments": segs}
	}
	if q := queryValues(r.URL.RawQuery); q != nil {
		doc["query"] = q
	}
	if !bodyKept && len(body) > 0 {
		if b := bodyValues(r.Header.Get("Content-Type"), body); b != nil {
			doc["body"] = b
		}
	}
	if len(doc) == 0 {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil
	}
	return out
}

// pathSegments are the decoded segments of a path that read as data (an
// address, a number, a token: kim@example.com, 12345, bot123:AbC), as an
// object's member names, which the ledger masks; not those that read as
// field names (customers, sendMessage), which it would not mask either
// (redact.DataName, its rule), so that a path of words alone adds nothing
// to the operation; nil when there are none.
func pathSegments(path string) map[string]any {
	var out map[string]any
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "" || !redact.DataName(seg) {
			continue
		}
		if out == nil {
			out = map[string]any{}
		}
		out[seg] = nil
	}
	return out
}

// queryValues are the names and values of a query or form, decoded, as
// an object of the names and their values (a name that reads as data,
// such as an address, is masked as a value is: see the ledger's
// sensitive fields); nil when there are none. What url.ParseQuery
// cannot decode is left out: the text is masked whole as the payload
// holds it.
func queryValues(raw string) map[string][]string {
	if raw == "" {
		return nil
	}
	q, _ := url.ParseQuery(raw)
	if len(q) == 0 {
		return nil
	}
	return q
}

// bodyValues are the values of a body the payload does not keep: those
// of a form, the strings, numbers and data-like member names of JSON, or
// a UTF-8 text body of at most maxUnstoredText bytes whole.
func bodyValues(contentType string, body []byte) map[string]any {
	out := map[string]any{}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "application/x-www-form-urlencoded" {
		if form := queryValues(string(body)); form != nil {
			out["form"] = form
		}
	}
	if json.Valid(body) {
		if values, names := jsonTokens(body); len(values) > 0 || len(names) > 0 {
			out["json"] = map[string]any{"values": values, "names": names}
		}
	} else if len(body) <= maxUnstoredText && utf8.Valid(body) {
		out["text"] = string(body)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// jsonTokens are the strings and numbers of a JSON document (numbers as
// written), and its member names as an object's names, every member and
// value of the document included, a repeated member's too, which a
// decoder into a map would drop.
func jsonTokens(doc []byte) (values []string, names map[string]any) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	// inObject tracks, for each open object or array, whether it is an
	// object; name whether the next token of the innermost object is a
	// member name.
	var inObject []bool
	name := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return values, names
		}
		switch x := tok.(type) {
		case json.Delim:
			switch x {
			case '{':
				inObject = append(inObject, true)
				name = true
				continue
			case '[':
				inObject = append(inObject, false)
			case '}', ']':
				inObject = inObject[:len(inObject)-1]
			}
		case string:
			if name {
				if names == nil {
					names = map[string]any{}
				}
				names[x] = nil
				name = false
				continue
			}
			if x != "" {
				values = append(values, x)
			}
		case json.Number:
			values = append(values, string(x))
		}
		// After a value (or a closed object or array) inside an object,
		// a member name comes next.
		name = len(inObject) > 0 && inObject[len(inObject)-1]
	}
}
