// Package jsonnum compares JSON numbers by their exact value: the
// fingerprint prints a number no double holds by its exact form, and a
// destination's lookup matches numbers by value, and its templates compare
// them. All use Exact (or Parse and Compare), so that the ledger has one
// notion of two numbers being the same.
//
// Allowed imports: the standard library.
package jsonnum

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// MaxExponent bounds the power of ten of an exact form; no payload needs
// more, and it keeps the arithmetic far from overflowing.
const MaxExponent = 1_000_000_000

// Value is a number's exact value: its sign, its significant digits
// (no leading or trailing zeros; none for zero, which is never negative)
// and the power of ten they are multiplied by.
type Value struct {
	Negative bool
	Digits   string
	Exp      int64
}

// String writes v as Exact does: "-17e-2", "0e0".
func (v Value) String() string {
	if v.Digits == "" {
		return "0e0"
	}
	sign := ""
	if v.Negative {
		sign = "-"
	}
	return sign + v.Digits + "e" + strconv.FormatInt(v.Exp, 10)
}

// Exact is the exact value of the valid JSON number text, in a form that
// only equal values share: its sign, its digits without leading or
// trailing zeros and the power of ten they are multiplied by, "-17e-2"
// for -0.170; "0e0" for any zero. It is linear in the length of text,
// whatever the exponent; one beyond ±MaxExponent is an error, which does
// not repeat text.
func Exact(text string) (string, error) {
	v, err := Parse(text)
	if err != nil {
		return "", err
	}
	return v.String(), nil
}

// Parse is the exact value of the valid JSON number text (Exact's, as a
// Value).
func Parse(text string) (Value, error) {
	var v Value
	if strings.HasPrefix(text, "-") {
		v.Negative, text = true, text[1:]
	}
	mantissa, expText, hasExp := strings.Cut(strings.ToLower(text), "e")
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e > MaxExponent || e < -MaxExponent {
			// Not the number itself: it may be a sensitive value, and
			// the fingerprint's error passes this one on.
			return Value{}, fmt.Errorf("a number has an exponent out of range (beyond ±%d)", MaxExponent)
		}
		v.Exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	v.Exp -= int64(len(frac))
	v.Digits = strings.TrimRight(digits, "0")
	v.Exp += int64(len(digits) - len(v.Digits))
	if v.Digits == "" {
		return Value{}, nil
	}
	return v, nil
}

// Compare is -1, 0 or 1 as x is less than, equal to or greater than y;
// linear in their digits, whatever their exponents.
func Compare(x, y Value) int {
	sx, sy := x.sign(), y.sign()
	if sx != sy || sx == 0 {
		return cmp.Compare(sx, sy)
	}
	// Of one sign: compare the magnitudes, then turn for negatives. The
	// leading digit stands at 10^(len(Digits)+Exp-1).
	c := cmp.Compare(int64(len(x.Digits))+x.Exp, int64(len(y.Digits))+y.Exp)
	if c == 0 {
		// The leading digits stand at the same power of ten; without
		// trailing zeros, the digits compare as text.
		c = strings.Compare(x.Digits, y.Digits)
	}
	return c * sx
}

func (v Value) sign() int {
	switch {
	case v.Digits == "":
		return 0
	case v.Negative:
		return -1
	}
	return 1
}
