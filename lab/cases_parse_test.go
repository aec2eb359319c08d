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
