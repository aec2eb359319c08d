package opledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// ErrUnauthorized: the bearer token is unknown or revoked.
var ErrUnauthorized = errors.New("unknown or revoked token")

// TokenPrefix starts every API token, so that a leaked one is easy to spot
// by secret scanners.
const TokenPrefix = "opl_"

// TokenInfo describes an API token; the secret itself is never stored.
type TokenInfo struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates an API token for the Ledger's tenant and returns the
// secret, which is shown once: only its SHA-256 is stored.
func (l *Ledger) CreateToken(ctx context.Context, name string) (secret string, info *TokenInfo, err error) {
	if name == "" {
		name = "token"
	}
	if len(name) > maxNameLength {
		return "", nil, invalidInput("token name is longer than %d bytes", maxNameLength)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, fmt.Errorf("create token: %w", err)
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", nil, fmt.Errorf("create token: %w", err)
	}
	tok := &store.Token{ID: "tok_" + hex.EncodeToString(id[:]), Tenant: l.tenant, Name: name, Hash: hashToken(secret)}
	err = l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		tok.CreatedAt = now
		return tx.InsertToken(ctx, tok)
	})
	if err != nil {
		return "", nil, fmt.Errorf("create token: %w", err)
	}
	return secret, tokenInfo(tok), nil
}

func tokenInfo(t *store.Token) *TokenInfo {
	return &TokenInfo{ID: t.ID, Tenant: t.Tenant, Name: t.Name, CreatedAt: t.CreatedAt, RevokedAt: timePtr(t.RevokedAt)}
}

// Tokens lists the tokens of the Ledger's tenant, or of every tenant when
// allTenants is true.
func (l *Ledger) Tokens(ctx context.Context, allTenants bool) ([]*TokenInfo, error) {
	tenant := l.tenant
	if allTenants {
		tenant = ""
	}
	var out []*TokenInfo
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		rows, err := r.ListTokens(ctx, tenant)
		for _, t := range rows {
			out = append(out, tokenInfo(t))
		}
		return err
	})
	return out, err
}

// RevokeToken revokes a token by its id ("tok_…"), whatever its tenant.
// Requests with it fail from then on. ErrNotFound if no active token has
// that id.
func (l *Ledger) RevokeToken(ctx context.Context, id string) error {
	err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		return tx.RevokeToken(ctx, id, now)
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("revoke %s: no active token with that id: %w", id, ErrNotFound)
	}
	return err
}

// Authenticate returns the tenant of an active token, or ErrUnauthorized.
func (l *Ledger) Authenticate(ctx context.Context, secret string) (string, error) {
	var tenant string
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		t, err := r.TokenByHash(ctx, hashToken(secret))
		if errors.Is(err, store.ErrNotFound) {
			return ErrUnauthorized
		}
		if err != nil {
			return err
		}
		if !t.RevokedAt.IsZero() {
			return ErrUnauthorized
		}
		tenant = t.Tenant
		return nil
	})
	return tenant, err
}
