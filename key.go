package opledger

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyLength is the longest key accepted, in bytes.
const MaxKeyLength = 200

// ValidateKey checks an operation key against
// ^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$. A key with '@' is refused with a
// message that keys must carry no personal data: keys travel into logs and
// third-party systems. The error is a *KeyError matching ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" {
		return &KeyError{Reason: "key is empty"}
	}
	if strings.IndexByte(key, '@') >= 0 {
		return &KeyError{Reason: "keys must carry no personal data such as e-mail addresses ('@' is not allowed); use a stable business identifier like intake:I17:create"}
	}
	if len(key) > MaxKeyLength {
		return &KeyError{Reason: "key is longer than " + strconv.Itoa(MaxKeyLength) + " bytes"}
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == ':' || c == '/' || c == '-'):
		case i == 0:
			return &KeyError{Reason: "key must start with a letter or digit"}
		default:
			r, _ := utf8.DecodeRuneInString(key[i:])
			return &KeyError{Reason: "key may contain only letters, digits and . _ : / - (byte " + strconv.Itoa(i+1) + ", " +
				strconv.QuoteRune(r) + ", is not one of them)"}
		}
	}
	return nil
}

// validateTenant applies the key syntax to tenant names.
func validateTenant(tenant string) error {
	if err := ValidateKey(tenant); err != nil {
		return invalidInput("tenant: %s", strings.TrimPrefix(err.Error(), "invalid key: "))
	}
	return nil
}

// DestinationIdempotencyKey derives the idempotency key sent to a
// destination that supports one. It depends only on tenant, operation key and
// version, so every attempt of the same approved content sends the same key,
// and a new version sends a new one. The key is opaque (a digest), so it
// carries nothing readable into the destination's logs.
func DestinationIdempotencyKey(tenant, key string, version int64) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(version, 10)))
	return "opl-" + hex.EncodeToString(h.Sum(nil)[:20])
}
