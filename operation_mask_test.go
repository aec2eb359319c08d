package opledger_test

import (
	"context"
	"encoding/json"
	"html"
	"html/template"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A destination that echoes the payload must not carry a sensitive value
// into the operation's JSON through the saved response.
func TestMarshalMasksSensitiveEchoesInResponse(t *testing.T) {
	t.Parallel()
	op := opledger.Operation{
		Key:             "k",
		Payload:         json.RawMessage(`{"customer":{"email":"ann@example.invalid","phone":5551234},"cards":[{"pan":"4111"}],"units":2}`),
		SensitiveFields: []string{"customer", "cards.pan"},
		Response:        json.RawMessage(`{"id":"R1","echo":{"customer":{"email":"ann@example.invalid","phone":5551234}},"note":"4111","units":2,"list":["ann@example.invalid","x"]}`),
	}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	out := string(b)
	for _, secret := range []string{"ann@example.invalid", "5551234", "4111"} {
		require.NotContains(t, out, secret)
	}
	var got struct {
		Response map[string]any `json:"response"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, "R1", got.Response["id"], "what is not sensitive stays")
	require.EqualValues(t, 2, got.Response["units"])
	require.Equal(t, []any{opledger.Mask, "x"}, got.Response["list"])
	require.Equal(t, `{"id":"R1","echo":{"customer":{"email":"ann@example.invalid","phone":5551234}},"note":"4111","units":2,"list":["ann@example.invalid","x"]}`,
		string(op.Response), "the library keeps the saved response as it is")

	// Nothing sensitive: the response is passed through byte for byte.
	op.SensitiveFields = nil
	b, err = json.Marshal(op)
	require.NoError(t, err)
	require.Contains(t, string(b), `"response":{"id":"R1","echo":`)
}

// Sensitive paths are masked wherever the payload's shape puts them: in an
// array at the top or on the way, in a member whose name holds the dots,
// and nested below one.
func TestMaskPayloadShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		payload string
		paths   []string
		want    string
	}{
		{`[{"email":"e@x.invalid","n":1},{"email":"f@x.invalid"}]`, []string{"email"},
			`[{"email":"***","n":1},{"email":"***"}]`},
		{`{"customer.email":"e@x.invalid","customer":{"email":"f@x.invalid","id":7}}`, []string{"customer.email"},
			`{"customer":{"email":"***","id":7},"customer.email":"***"}`},
		{`{"a.b":{"c":"s1"},"a":{"b.c":"s2","b":{"c":"s3"}}}`, []string{"a.b.c"},
			`{"a":{"b":{"c":"***"},"b.c":"***"},"a.b":{"c":"***"}}`},
		{`{"rows":[[{"iban":"DE89"}],[{"iban":"FR76"}]],"keep":"x"}`, []string{"rows.iban"},
			`{"keep":"x","rows":[[{"iban":"***"}],[{"iban":"***"}]]}`},
		{`{"card":["4111","4242"]}`, []string{"card"}, `{"card":"***"}`},
		{`{"absent":1}`, []string{"email"}, `{"absent":1}`},
		{`"just a string"`, []string{"email"}, `"just a string"`},
	}
	for _, c := range cases {
		got := opledger.MaskPayload(json.RawMessage(c.payload), c.paths)
		require.JSONEq(t, c.want, string(got), c.payload)
	}

	// What the payload hides, an echo in the response does not show either.
	op := opledger.Operation{
		Payload:         json.RawMessage(`[{"customer.email":"erin@example.invalid"}]`),
		SensitiveFields: []string{"customer.email"},
		Response:        json.RawMessage(`{"to":"erin@example.invalid"}`),
	}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	require.NotContains(t, string(b), "erin@example.invalid")
}

// Numbers are shown as they were written, however long, and a long
// integer that is sensitive is masked where the response echoes it; the
// response is masked at the payload's sensitive paths too.
func TestMaskKeepsNumbersAndMasksResponsePaths(t *testing.T) {
	t.Parallel()
	op := opledger.Operation{
		Key:             "k",
		Payload:         json.RawMessage(`{"acct":12345678901234567891,"order":98765432109876543219,"price":1.10,"customer":{"email":"e@x.invalid"}}`),
		SensitiveFields: []string{"acct", "customer"},
		Response: json.RawMessage(`{"id":"R1","account":12345678901234567891,"acct_str":"12345678901234567891","near":12345678901234567890,` +
			`"price":1.1,"customer":{"id":7,"tier":"gold"},"order":98765432109876543219}`),
	}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	var got struct {
		Payload  json.RawMessage `json:"payload"`
		Response json.RawMessage `json:"response"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.JSONEq(t, `{"acct":"***","order":98765432109876543219,"price":1.10,"customer":"***"}`, string(got.Payload))
	require.Contains(t, string(got.Payload), `98765432109876543219`, "not rounded")
	require.JSONEq(t, `{"id":"R1","account":"***","acct_str":"***","near":12345678901234567890,"price":1.1,"customer":"***","order":98765432109876543219}`,
		string(got.Response), "echoes masked exactly, the sensitive path masked, the rest as written")
	require.Contains(t, string(got.Response), `12345678901234567890`)
}

// sensitive_fields is [] when there are none, never null: the same
// operation reads back from the store with an empty list, and a client
// should not see the field change type between a 201 and a 200.
func TestMarshalSensitiveFieldsNeverNull(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(opledger.Operation{Key: "k"})
	require.NoError(t, err)
	require.Contains(t, string(b), `"sensitive_fields":[]`)
}

// A sensitive value quoted inside a response's text (a destination's
// error, a note) is masked there too, in every spelling the ledger
// masks in stored text (JSON-escaped, URL-escaped, an e-mail address in
// any case); a short one only where it is the whole value. The
// destination reference and the attempts' references are shown masked
// the same way, and the operation keeps the real values.
func TestMaskedMasksSensitiveTextInResponseAndRefs(t *testing.T) {
	t.Parallel()
	op := &opledger.Operation{
		Key:             "k",
		Payload:         json.RawMessage(`{"customer":{"email":"ana@example.invalid","name":"Zoë <Lang>"},"flag":"ab","units":2}`),
		SensitiveFields: []string{"customer", "flag"},
		Response: json.RawMessage(`{"error":"invalid address ana@example.invalid","note":"created for Zoë <Lang>",` +
			`"short":"ab","shortin":"tab stop","detail":"ANA@Example.INVALID rejected","q":"to=ana%40example.invalid",` +
			`"esc":"{\"name\":\"Zo\\u00eb \\u003cLang\\u003e\"}","list":[{"msg":"hi ana@example.invalid"}],"id":"R1","units":2}`),
		DestinationRef: "contact:ana@example.invalid",
	}
	raw := *op
	shown := op.Masked()
	require.JSONEq(t, `{"error":"invalid address ***","note":"created for ***","short":"***","shortin":"tab stop",`+
		`"detail":"*** rejected","q":"to=***","esc":"{\"name\":\"***\"}","list":[{"msg":"hi ***"}],"id":"R1","units":2}`,
		string(shown.Response))
	require.Equal(t, "contact:***", shown.DestinationRef)
	require.JSONEq(t, `{"customer":"***","flag":"***","units":2}`, string(shown.Payload))
	require.Equal(t, raw, *op, "the operation keeps the real values")

	b, err := json.Marshal(op)
	require.NoError(t, err)
	for _, secret := range []string{"ana@", "ANA@", "ana%40", "Zo", "Lang"} {
		require.NotContains(t, string(b), secret)
	}
	require.Contains(t, string(b), `"destination_ref":"contact:***"`)

	for ref, want := range map[string]string{
		"ana@example.invalid": "***", "ab": "***", // the value itself, however short
		"<m1.ANA@example.invalid>": "<m1.***>", "tab": "tab", "C-17": "C-17",
	} {
		op.DestinationRef = ref
		require.Equal(t, want, op.Masked().DestinationRef, ref)
	}

	attempts := []*opledger.Attempt{{Number: 1, DestinationRef: "ana@example.invalid", Error: "e"}, {Number: 2, DestinationRef: "C-1"}}
	masked := op.MaskedAttempts(attempts)
	require.Equal(t, "***", masked[0].DestinationRef)
	require.Equal(t, "C-1", masked[1].DestinationRef)
	require.Equal(t, "e", masked[0].Error)
	require.Equal(t, "ana@example.invalid", attempts[0].DestinationRef, "copies: the attempts keep the real values")

	// Without sensitive fields nothing is masked.
	plain := &opledger.Operation{Payload: op.Payload, Response: op.Response, DestinationRef: "ana@example.invalid"}
	require.Equal(t, "ana@example.invalid", plain.Masked().DestinationRef)
	require.Equal(t, string(op.Response), string(plain.Masked().Response))
	require.Same(t, attempts[0], plain.MaskedAttempts(attempts)[0])
}

// A sensitive value echoed in an HTML page (an error page repeating a
// form's input) is masked however the page's escaper wrote its &, <, >
// and quotes, and so is one whose ' a backslash escapes.
func TestMaskedHTMLEscapedEchoes(t *testing.T) {
	t.Parallel()
	name := `Ann O'Brien & "Sons" <SECRET170>`
	payload, err := json.Marshal(map[string]string{"name": name})
	require.NoError(t, err)
	for _, echo := range []string{
		html.EscapeString(name), // Go: &#39; &#34;
		`Ann O&#x27;Brien &amp; &quot;Sons&quot; &lt;SECRET170&gt;`, // Python's html.escape
		`Ann O&#039;Brien &amp; &quot;Sons&quot; &lt;SECRET170&gt;`, // PHP's htmlspecialchars
		`Ann O&apos;Brien &amp; "Sons" &lt;SECRET170&gt;`,
		`Ann O\'Brien & "Sons" <SECRET170>`,
		htmlTemplateEscaped(t, name), // html/template: &#39; &#34;
	} {
		resp, err := json.Marshal(map[string]string{"html": "<p>No account for " + echo + ".</p>"})
		require.NoError(t, err)
		op := &opledger.Operation{Key: "k", Payload: payload, SensitiveFields: []string{"name"}, Response: resp}
		require.JSONEq(t, `{"html":"<p>No account for ***.</p>"}`, string(op.Masked().Response), echo)
	}
}

// htmlTemplateEscaped is s as html/template writes it in an element.
func htmlTemplateEscaped(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, template.Must(template.New("p").Parse(`{{.}}`)).Execute(&b, s))
	return b.String()
}

// TestMaskedPlusAddressEscaped: an e-mail address or phone number with a
// + is masked as html/template writes it (&#43;).
func TestMaskedPlusAddressEscaped(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"ana+shop@example.com", "+44 20 7946 0958"} {
		payload, err := json.Marshal(map[string]string{"v": v})
		require.NoError(t, err)
		op := &opledger.Operation{Key: "k", Payload: payload, SensitiveFields: []string{"v"}}
		echo := htmlTemplateEscaped(t, v)
		require.Contains(t, echo, "&#43;")
		require.Equal(t, "<p>***</p>", op.MaskText("<p>"+echo+"</p>"), v)
	}
}

// A sensitive number is masked in text as the payload wrote it, not only
// in its shortest form: a destination that quotes the payload repeats
// 1.5e3 or 1.50, not 1500 or 1.5.
func TestMaskedNumberAsWritten(t *testing.T) {
	t.Parallel()
	op := &opledger.Operation{
		Payload:         json.RawMessage(`{"amount":1.5e3,"rate":1.50,"pin":4711}`),
		SensitiveFields: []string{"amount", "rate", "pin"},
		Response: json.RawMessage(`{"error":"amount 1.5e3 over the limit","r":"1.50 is not a rate","p":"4711 wrong",` +
			`"shortest":1500,"text":"1.5e3"}`),
		DestinationRef: "quote-1.5e3",
	}
	shown := op.Masked()
	require.JSONEq(t, `{"error":"amount *** over the limit","r":"*** is not a rate","p":"*** wrong","shortest":"***","text":"***"}`,
		string(shown.Response))
	require.Equal(t, "quote-***", shown.DestinationRef)
}

// An e-mail address with letters outside ASCII is masked when a
// destination repeats it in lower or upper case, in any spelling: folded
// matching ignores the case of ASCII letters only, so each case of the
// others is looked for too.
func TestMaskedNonASCIIEmailInAnyCase(t *testing.T) {
	t.Parallel()
	op := &opledger.Operation{
		Key:             "k",
		Payload:         json.RawMessage(`{"email":"Émile.Müller@Example.invalid"}`),
		SensitiveFields: []string{"email"},
		Response: json.RawMessage(`{"as_sent":"Émile.Müller@Example.invalid","lower":"sent to émile.müller@example.invalid",` +
			`"upper":"SENT TO ÉMILE.MÜLLER@EXAMPLE.INVALID","ascii_upper":"ÉMILE.MüLLER@EXAMPLE.INVALID",` +
			`"escaped":"\u00e9mile.m\u00fcller@example.invalid","url":"to=%C3%A9mile.m%c3%bcller%40example.invalid"}`),
	}
	require.JSONEq(t, `{"as_sent":"***","lower":"sent to ***","upper":"SENT TO ***","ascii_upper":"***",`+
		`"escaped":"***","url":"to=***"}`, string(op.Masked().Response))
}

// An e-mail address is masked when a destination repeats it in any mix
// of cases, letters outside ASCII too (as strings.EqualFold compares),
// however often and whatever stands next to it, and exactly its bytes go
// when a case takes more or fewer of them than the address as sent
// (U+212A, the Kelvin sign, is three bytes, k one; ſ two, s one; U+212B,
// the Angstrom sign, three, å two). A value that is not an address is still matched in its
// own case only.
func TestMaskedNonASCIIEmailInMixedCase(t *testing.T) {
	t.Parallel()
	op := &opledger.Operation{
		Key: "k",
		Payload: json.RawMessage(`{"email":"émile.müller@example.com","alt":"kåre.sørensen@example.com",` +
			`"old":"\u212aim.\u017fmith@example.org","name":"Zoë Lang"}`),
		SensitiveFields: []string{"email", "alt", "old", "name"},
		Response: json.RawMessage(`{"title":"Émile.Müller@Example.com","first":"ÉMILE.müller@example.com",` +
			`"twice":"to émile.MÜLLER@EXAMPLE.COM, cc Émile.müller@example.COM.","glued":"x<éMILE.mÜller@Example.com>y",` +
			`"kelvin":"é \u212aåre.Sørensen@Example.com é","long_s":"é\u212a\u212bRE.\u017fØRENSEN@EXAMPLE.COMé",` +
			`"mixed":"[\u212aåre.\u017fører@x][kåre.sørensen@example.com][Émile.müller@example.com]","note":"ZOË LANG zoë lang Zoë Lang",` +
			`"legacy":"(kim.smith@example.org)"}`),
		DestinationRef: "contact:Émile.MÜLLER@example.com;",
	}
	shown := op.Masked()
	require.JSONEq(t, `{"title":"***","first":"***","twice":"to ***, cc ***.","glued":"x<***>y",`+
		`"kelvin":"é *** é","long_s":"é***é","mixed":"[\u212aåre.\u017fører@x][***][***]","note":"ZOË LANG zoë lang ***",`+
		`"legacy":"(***)"}`,
		string(shown.Response))
	require.Equal(t, "contact:***;", shown.DestinationRef)
	require.Equal(t, "***", op.MaskedAttempts([]*opledger.Attempt{{Number: 1, DestinationRef: "ÉMILE.Müller@EXAMPLE.com"}})[0].DestinationRef)
}

// TestSensitiveFieldAsJSONPointerRefused: "/to" (a JSON pointer, as
// destinations.yaml writes paths) would mask nothing, and so would a
// path with an empty segment ("to."); they are refused with what to
// write instead, and nothing is recorded.
func TestSensitiveFieldAsJSONPointerRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "l.db"), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	in := opledger.Intent{Key: "mail:1", Action: "mail.send", Destination: "mail",
		Payload: json.RawMessage(`{"to":"ana@example.com"}`), SensitiveFields: []string{"/to"}}
	_, _, err = l.Record(ctx, in)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, `sensitive_fields: "/to" is a JSON pointer: entries are dotted paths (customer.email)`)
	for _, f := range []string{"to.", ".to", "a..to"} {
		in.SensitiveFields = []string{f}
		_, _, err = l.Record(ctx, in)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, f)
		require.ErrorContains(t, err, "has an empty segment", f)
	}
	_, err = l.Get(ctx, "mail:1")
	require.ErrorIs(t, err, opledger.ErrNotFound)
	in.SensitiveFields = []string{"to"}
	op, _, err := l.Record(ctx, in)
	require.NoError(t, err)
	require.NotContains(t, string(op.Masked().Payload), "ana@example.com")
}

// TestDestinationNameIsNotFreeText: a destination labels metrics and log
// lines, so it takes the key syntax, as in destinations.yaml; the refusal
// does not echo what was sent.
func TestDestinationNameIsNotFreeText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "l.db"), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	for _, dest := range []string{"ana@example.com", "Ana Díaz", "-crm", "crm\n"} {
		_, _, err := l.Record(ctx, opledger.Intent{Key: "k:1", Action: "a", Destination: dest})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, dest)
		require.ErrorContains(t, err, "destination names take letters, digits and . _ : / - only")
		require.NotContains(t, err.Error(), dest)
	}
	_, _, err = l.Record(ctx, opledger.Intent{Key: "k:1", Action: "a", Destination: "proxy:crm.eu-1"})
	require.NoError(t, err)
}

// TestForClaimantShowsOnlyThePayload: the claimant's copy marshals with
// the real payload and everything else masked; masked again, it is
// masked like any operation, so nothing shows the real payload by way
// of it.
func TestForClaimantShowsOnlyThePayload(t *testing.T) {
	op := &opledger.Operation{Key: "k", Payload: json.RawMessage(`{"email":"ana@example.invalid","n":1}`),
		SensitiveFields: []string{"email"}, DestinationRef: "contact/ana@example.invalid"}
	b, err := json.Marshal(op.ForClaimant())
	require.NoError(t, err)
	require.Contains(t, string(b), `"payload":{"email":"ana@example.invalid","n":1}`)
	require.Contains(t, string(b), `"destination_ref":"contact/***"`)
	for _, shown := range []*opledger.Operation{op.ForClaimant().Masked(), op.Masked().ForClaimant()} {
		b, err = json.Marshal(shown)
		require.NoError(t, err)
		require.NotContains(t, string(b), "ana@example.invalid")
	}
}

// TestSensitiveObjectMemberNames: the member names of an object inside a
// sensitive field are its content when they read as data (recipients
// keyed by address), and are masked wherever its values are: in the
// stored error, the attempt and timeline, and the response. Names that
// read as field names ("city") stay, so that texts keep their words.
func TestSensitiveObjectMemberNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	in := opledger.Intent{Key: "k", Action: "send", Destination: "mail",
		Payload:         json.RawMessage(`{"recipients":{"kim.secret@example.com":"cc","+4915112345678":"sms"},"address":{"city":"Lisbon"}}`),
		SensitiveFields: []string{"recipients", "address"}}
	c, err := l.Claim(ctx, "k", opledger.ClaimOptions{Intent: &in})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "k", c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, "k", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected,
		Error:    "unknown recipient kim.secret@example.com, no route to +4915112345678, invalid city Lisbon",
		Response: json.RawMessage(`{"got":{"recipients":{"kim.secret@example.com":"cc"}}}`)})
	require.NoError(t, err)
	op, err := l.Get(ctx, "k")
	require.NoError(t, err)
	attempts, err := l.Attempts(ctx, "k")
	require.NoError(t, err)
	tl, err := l.Timeline(ctx, "k")
	require.NoError(t, err)
	var shown strings.Builder
	for _, v := range []any{op.Masked(), op.MaskedAttempts(attempts), tl} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		shown.Write(b)
	}
	for _, secret := range []string{"kim.secret@example.com", "4915112345678", "Lisbon"} {
		require.NotContains(t, shown.String(), secret)
	}
	require.Equal(t, "unknown recipient ***, no route to ***, invalid city ***", op.LastError)
}

// TestMaskedResponseMemberTwice: an answer that names a member twice is
// decoded as its last value; an earlier one holding a sensitive value is
// not shown (before, masking found nothing to change in the decoded
// answer and showed the text as it came, secret included).
func TestMaskedResponseMemberTwice(t *testing.T) {
	t.Parallel()
	op := opledger.Operation{Key: "k",
		Payload:         json.RawMessage(`{"email":"ada.lovelace@example.invalid"}`),
		SensitiveFields: []string{"email"},
		Response:        json.RawMessage(`{"id":"R1","note":"ada.lovelace@example.invalid","note":"hidden"}`)}
	shown := op.Masked().Response
	require.NotContains(t, string(shown), "lovelace")
	require.JSONEq(t, `{"id":"R1","note":"hidden"}`, string(shown))
}

// TestMaskedResponseShapes: a response whose text merely holds a
// sensitive value's digits inside a longer number is shown as it is;
// members named twice are shown once, re-encoded, whether the earlier
// one sits at a sensitive path or holds a value too short to mask in
// text; identifier-like member names with digits ("line2") and short
// numeric ones ("1") inside a sensitive field mask no words or numbers.
func TestMaskedResponseShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		payload, response, want string
		sensitive               []string
	}{
		{`{"pin":"4821"}`, `{"id":"R1","created":1733482110}`, `{"id":"R1","created":1733482110}`, []string{"pin"}},
		{`{"card":{"token":"tok_old"}}`, `{"card":{"token":"tok_NEW_issued_secret"},"card":{"brand":"visa"}}`, `{"card":{"brand":"visa"}}`, []string{"card.token"}},
		{`{"code":"X7"}`, `{"echo":"X7","echo":"ok"}`, `{"echo":"ok"}`, []string{"code"}},
		{`{"address":{"line1":"1 Main St","line2":"Apt 4"}}`, `{"error":"Missing required param: address[line2].","shipping":{"line1":"x","line2":"y"}}`,
			`{"error":"Missing required param: address[line2].","shipping":{"line1":"x","line2":"y"}}`, []string{"address"}},
		{`{"answers":{"1":"yes","2":"no"}}`, `{"page":1,"count":2}`, `{"page":1,"count":2}`, []string{"answers"}},
		// A number written as text comes back as a number, in any spelling.
		{`{"limit":"2.50"}`, `{"id":"R1","applied":2.50,"again":2.5}`, `{"id":"R1","applied":"***","again":"***"}`, []string{"limit"}},
		// A number past a double is no duplicate name: shown as it is.
		{`{"pin":"4821"}`, `{"b":1,"a":"<x>","n":1e400}`, `{"b":1,"a":"<x>","n":1e400}`, []string{"pin"}},
	} {
		op := opledger.Operation{Key: "k", Payload: json.RawMessage(c.payload), SensitiveFields: c.sensitive, Response: json.RawMessage(c.response)}
		if c.want == c.response {
			require.Equal(t, c.want, string(op.Masked().Response), "shown as it is")
			continue
		}
		require.JSONEq(t, c.want, string(op.Masked().Response), "%s", c.response)
	}
}
