package lab

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// maxRequestBytes bounds a request body.
const maxRequestBytes = 1 << 20

// readRequest reads the wire format {"key", "external_ref", "payload"} and
// the Idempotency-Key header.
func readRequest(req *http.Request) (request, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBytes))
	if err != nil {
		return request{}, errors.New("read the request body")
	}
	var in struct {
		Key         string          `json:"key"`
		ExternalRef string          `json:"external_ref"`
		Payload     json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return request{}, errors.New("the body is not a JSON object")
	}
	p, err := canonical(in.Payload)
	if err != nil {
		return request{}, err
	}
	ref := in.ExternalRef
	if ref == "" {
		ref = payloadRef(p)
	}
	return request{key: in.Key, externalRef: ref, idemKey: req.Header.Get(IdempotencyHeader), payload: p}, nil
}

// writeAnswer writes the answer, or closes the connection without one.
func writeAnswer(w http.ResponseWriter, a answer) {
	if a.noAnswer {
		// The request was read; the caller gets no answer at all, as
		// after a lost response or a timeout.
		panic(http.ErrAbortHandler)
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	if a.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}
