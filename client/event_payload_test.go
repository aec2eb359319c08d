package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEventPayloadTooLarge: an event whose payload is past
// MaxEventPayload, refused by the server (413 payload_too_large, whether
// its body limit or the event payload limit refused it), matches
// opledger.ErrEventPayloadTooLarge through the client as the library's
// own refusal does, and ErrInvalidInput. A body past a server's lower
// limit whose payload is within MaxEventPayload is too large for that
// server only: it matches ErrInvalidInput, not ErrEventPayloadTooLarge.
func TestEventPayloadTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	secret, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	withLimit := func(maxBody int64) *client.Client {
		h, err := httpapi.New(l, httpapi.Options{Auth: l, MaxBodyBytes: maxBody, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return client.New(srv.URL, secret, nil)
	}
	event := func(id string, payloadBytes int) opledger.Event {
		return opledger.Event{Source: "forms", EventID: id, Type: "t",
			Payload: json.RawMessage(`"` + strings.Repeat("x", payloadBytes-2) + `"`)}
	}
	tooLarge := event("big", opledger.MaxEventPayload+1)
	_, err = l.ReceiveEvent(ctx, nil, tooLarge)
	require.ErrorIs(t, err, opledger.ErrEventPayloadTooLarge, "the library's refusal")

	for name, c := range map[string]*client.Client{
		"body limit (default 1 MiB)":  withLimit(0),
		"event payload limit (4 MiB)": withLimit(4 << 20),
	} {
		_, err := c.ReceiveEvent(ctx, tooLarge)
		var e *client.Error
		require.ErrorAs(t, err, &e, name)
		require.Equal(t, "payload_too_large", e.Kind(), name)
		require.ErrorIs(t, err, opledger.ErrEventPayloadTooLarge, name)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
	}

	// Within MaxEventPayload, past this server's body limit.
	_, err = withLimit(64<<10).ReceiveEvent(ctx, event("mid", 100<<10))
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "payload_too_large", e.Kind())
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.False(t, errors.Is(err, opledger.ErrEventPayloadTooLarge), "the library would take this payload")
	// Nothing was recorded.
	page, err := l.ListEvents(ctx, opledger.EventListOptions{})
	require.NoError(t, err)
	require.Empty(t, page.Items)
}
