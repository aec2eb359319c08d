package lab_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/lab"
)

// TestParseCasesStateNone: the state column accepts none, the state the
// runner reports for an operation that was never recorded; an unknown
// word is refused with the list of states, none among them.
func TestParseCasesStateNone(t *testing.T) {
	t.Parallel()
	header := strings.Join(lab.CaseColumns, ",")
	cases, err := lab.ParseCases(strings.NewReader(header + "\nnever,production,crm,none,crash before_claim,0,0,0,0,0,none,t,t,e,e\n"))
	require.NoError(t, err)
	require.Len(t, cases, 1)
	require.Equal(t, lab.StateNone, cases[0].Want.State)

	_, err = lab.ParseCases(strings.NewReader(header + "\nnever,production,crm,none,crash before_claim,0,0,0,0,0,gone,t,t,e,e\n"))
	var fe *lab.FileError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, 2, fe.Line)
	require.Contains(t, fe.Msg, `state: "gone" is not a state (`)
	require.Contains(t, fe.Msg, "failed, none)")
}

// TestParseCasesAdvancesAddUp: advances that each fit a duration but
// together do not are refused before anything runs, naming the line and
// the step; the lab clock would otherwise wrap around and run backwards
// (a payment key 4,000,000 hours old taken for one still remembered).
func TestParseCasesAdvancesAddUp(t *testing.T) {
	t.Parallel()
	header := strings.Join(lab.CaseColumns, ",")
	_, err := lab.ParseCases(strings.NewReader(header +
		"\nfar,interactive,payment,lost_response,send; advance 2000000h; advance 2000000h; verify,1,1,0,0,0,held,t,t,e,e\n"))
	var fe *lab.FileError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, 2, fe.Line)
	require.Equal(t, `steps: step 3 "advance 2000000h": the advances add up to more than about 2562047h`, fe.Msg)

	// Up to the limit they are taken.
	cases, err := lab.ParseCases(strings.NewReader(header +
		"\nfar,interactive,payment,lost_response,send; advance 1000000h; advance 1000000h; verify,1,1,0,0,0,held,t,t,e,e\n"))
	require.NoError(t, err)
	require.Len(t, cases[0].Steps, 4)
}

// TestParseCasesLookupFault: lookup_error is taken by a lookup, so only a
// case whose destination looks records up (the CRM, also behind a
// webhook) may inject it; an e-mail or payment case that does is refused
// before anything runs, naming the line.
func TestParseCasesLookupFault(t *testing.T) {
	t.Parallel()
	header := strings.Join(lab.CaseColumns, ",")
	for _, dest := range []string{"crm", "webhook"} {
		cases, err := lab.ParseCases(strings.NewReader(header + "\nl," + "interactive," + dest + ",lost_response;lookup_error,send; verify,1,1,1,0,0,uncertain,t,t,e,e\n"))
		require.NoError(t, err, dest)
		require.Equal(t, []lab.Fault{lab.FaultLostResponse, lab.FaultLookupError}, cases[0].Faults)
	}
	for _, dest := range []string{"email", "payment"} {
		_, err := lab.ParseCases(strings.NewReader(header + "\nl,interactive," + dest + ",lost_response;lookup_error,send; verify,1,1,0,0,0,held,t,t,e,e\n"))
		var fe *lab.FileError
		require.ErrorAs(t, err, &fe, dest)
		require.Equal(t, 2, fe.Line)
		require.Equal(t, "faults: fault lookup_error fails a lookup, and "+dest+" offers none (only the crm looks records up)", fe.Msg)
	}
}
