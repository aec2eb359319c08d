package opledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// Fingerprint returns "sha256:" + the hex SHA-256 of the RFC 8785 (JCS)
// canonical JSON of {action, destination, payload, version}. Two intents with
// the same fingerprint are the same content, whatever the key order or
// number formatting of their payloads.
func Fingerprint(action, destination string, payload json.RawMessage, version int64) (string, error) {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return "", invalidInput("payload is not valid JSON")
	}
	doc, err := json.Marshal(struct {
		Action      string          `json:"action"`
		Destination string          `json:"destination"`
		Payload     json.RawMessage `json:"payload"`
		Version     int64           `json:"version"`
	}{action, destination, payload, version})
	if err != nil {
		return "", fmt.Errorf("encode fingerprint document: %w", err)
	}
	canon, err := jcs.Transform(doc)
	if err != nil {
		return "", invalidInput("payload cannot be canonicalized: %v", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
