// Package jsonnum compares JSON numbers by their exact value: the
// fingerprint prints a number no double holds by its exact form, and a
// destination's lookup matches numbers by value. Both use Exact, so that
// the ledger has one notion of two numbers being the same.
//
// Allowed imports: the standard library.
package jsonnum

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxExponent bounds the power of ten of an exact form; no payload needs
// more, and it keeps the arithmetic far from overflowing.
const MaxExponent = 1_000_000_000

// Exact is the exact value of the valid JSON number text, in a form that
// only equal values share: its sign, its digits without leading or
// trailing zeros and the power of ten they are multiplied by, "-17e-2"
// for -0.170; "0e0" for any zero. It is linear in the length of text,
// whatever the exponent; one beyond ±MaxExponent is an error, which does
// not repeat text.
func Exact(text string) (string, error) {
	sign := ""
	if strings.HasPrefix(text, "-") {
		sign, text = "-", text[1:]
	}
	mantissa, expText, hasExp := strings.Cut(strings.ToLower(text), "e")
	exp := int64(0)
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e > MaxExponent || e < -MaxExponent {
			// Not the number itself: it may be a sensitive value, and
			// the fingerprint's error passes this one on.
			return "", fmt.Errorf("a number has an exponent out of range (beyond ±%d)", MaxExponent)
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	if trimmed == "" {
		return "0e0", nil
	}
	return sign + trimmed + "e" + strconv.FormatInt(exp, 10), nil
}
