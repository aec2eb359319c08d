package destination

import (
	"encoding/json"
	"fmt"
	"math/big"
)

// printf is text/template's printf (fmt.Sprintf), with each of the
// payload's numbers (json.Number, exact as written) formatted as the
// number it is by a number's verbs: fmt takes a json.Number for text,
// and "%.2f" would render "%!f(json.Number=12)" into the request, sent
// with no error. With %s, %v and %q it is the number as written, as
// before.
func printf(format string, args ...any) string {
	for i, a := range args {
		if n, ok := a.(json.Number); ok {
			args[i] = payloadNumber(n)
		}
	}
	return fmt.Sprintf(format, args...)
}

// payloadNumber is a payload's number as printf formats it.
type payloadNumber json.Number

// Format formats n: as an integer for the integer verbs when it is a
// whole number, as a float for the float verbs (and the integer verbs
// otherwise, as fmt formats a float given them), as its text for any
// other verb.
func (n payloadNumber) Format(f fmt.State, verb rune) {
	format := fmt.FormatString(f, verb)
	switch verb {
	case 'd', 'b', 'o', 'O', 'x', 'X', 'c', 'U':
		if i, ok := n.integer(); ok {
			fmt.Fprintf(f, format, i)
			return
		}
		if x, ok := n.float(); ok {
			fmt.Fprintf(f, format, x)
			return
		}
	case 'e', 'E', 'f', 'F', 'g', 'G':
		if x, ok := n.float(); ok {
			fmt.Fprintf(f, format, x)
			return
		}
	}
	fmt.Fprintf(f, format, string(n))
}

// integer is n as a whole number, when it is one ("1e3" is; "2.5" is
// not), within the exponents jsonnum compares by value.
func (n payloadNumber) integer() (*big.Int, bool) {
	v, ok := numberValue(json.Number(n))
	if !ok || v.Exp < 0 || v.Exp > maxExactExponent {
		return nil, false
	}
	i, ok := new(big.Int).SetString(v.Digits, 10)
	if v.Digits == "" {
		i, ok = new(big.Int), true
	}
	if !ok {
		return nil, false
	}
	i.Mul(i, new(big.Int).Exp(big.NewInt(10), big.NewInt(v.Exp), nil))
	if v.Negative {
		i.Neg(i)
	}
	return i, true
}

// float is n as a float of ample precision (256 bits), rounded from its
// decimal text.
func (n payloadNumber) float() (*big.Float, bool) {
	x, _, err := big.ParseFloat(string(n), 10, 256, big.ToNearestEven)
	return x, err == nil
}
