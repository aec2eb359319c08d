package opledger_test

import "regexp"

// keyPattern is the key syntax of DESIGN.md section 2, used to cross-check
// the hand-written validator.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$`)
