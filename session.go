package opledger

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// SessionPrefix starts every session secret, so that a leaked one is easy
// to tell from an API token (TokenPrefix).
const SessionPrefix = "opls_"

// OpenSession signs a browser in with an API token: it checks the token
// and stores a session of the token's tenant that lasts ttl, and returns
// the session's secret, for an HttpOnly cookie, and when it expires. The
// console keeps this secret in its cookie rather than the token itself,
// so a copied cookie is worth at most ttl and nothing outside the console.
//
// Only the SHA-256 of the secret is stored: reading the database gives no
// session away. A session ends when it expires, when it is closed
// (CloseSession), or as soon as its token is revoked; Compact deletes the
// expired ones. ErrUnauthorized if the token is unknown or revoked.
func (l *Ledger) OpenSession(ctx context.Context, token string, ttl time.Duration) (secret string, expiresAt time.Time, err error) {
	if ttl <= 0 {
		return "", time.Time{}, invalidInput("a session must last longer than zero, not %s", ttl)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("open session: %w", err)
	}
	secret = SessionPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	err = l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		tok, err := activeToken(ctx, tx, hashToken(token))
		if err != nil {
			return err
		}
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		expiresAt = now.Add(ttl)
		// Signing in is a use of the token (TokenInfo.LastUsedAt).
		if err := l.noteTokenUse(ctx, tx, tok.ID); err != nil {
			return err
		}
		return tx.InsertSession(ctx, &store.Session{Hash: hashToken(secret), TokenID: tok.ID, Tenant: tok.Tenant,
			CreatedAt: now, ExpiresAt: expiresAt})
	})
	if errors.Is(err, ErrUnauthorized) {
		return "", time.Time{}, err
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("open session: %w", err)
	}
	return secret, expiresAt, nil
}

// SessionToken returns the token an open session was signed in with (its
// tenant, ID, name and access), or ErrUnauthorized when the session is unknown,
// expired or closed, or its token has been revoked.
func (l *Ledger) SessionToken(ctx context.Context, secret string) (*TokenInfo, error) {
	var info *TokenInfo
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		s, err := r.SessionByHash(ctx, hashToken(secret))
		if errors.Is(err, store.ErrNotFound) {
			return ErrUnauthorized
		}
		if err != nil {
			return err
		}
		now, err := l.now(ctx, r)
		if err != nil {
			return err
		}
		if !s.TokenRevokedAt.IsZero() || !now.Before(s.ExpiresAt) {
			return ErrUnauthorized
		}
		info = &TokenInfo{ID: s.TokenID, Tenant: s.Tenant, Name: s.TokenName, Access: accessOf(s.TokenAccess)}
		return nil
	})
	if errors.Is(err, ErrUnauthorized) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	return info, nil
}

// CloseSession ends a session (signing out). Closing a session that is
// unknown or already ended is not an error.
func (l *Ledger) CloseSession(ctx context.Context, secret string) error {
	err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.DeleteSession(ctx, hashToken(secret))
	})
	if err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}
