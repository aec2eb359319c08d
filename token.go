package opledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// ErrUnauthorized: the bearer token is unknown or revoked.
var ErrUnauthorized = errors.New("unknown or revoked token")

// ErrForbidden: a token was used for what its access does not allow: a
// ReadOnly token to write, or a Worker token to take an operator's
// decision. The HTTP API answers 403 forbidden, and the client package's
// errors match ErrForbidden; the library itself trusts its caller and
// checks no token.
var ErrForbidden = errors.New("the token's access does not allow this")

// TokenPrefix starts every API token, so that a leaked one is easy to spot
// by secret scanners.
const TokenPrefix = "opl_"

// TokenAccess is what an API token may do.
type TokenAccess int

const (
	// ReadWrite tokens may do everything the HTTP API and the console
	// offer their tenant: record and claim operations, report outcomes,
	// post events, approve, resolve.
	ReadWrite TokenAccess = iota
	// ReadOnly tokens may only read: GET routes of the HTTP API, the
	// console's pages without their forms. For dashboards, scrapers of
	// /v1/stats, and people who watch the exception queue but do not
	// decide. A write with one is refused (403 forbidden on the API).
	ReadOnly
	// Worker tokens may do everything an automation does, and read, but
	// take no operator's decision: they record, claim, dispatch, report,
	// reconcile, revise and resume, post events and workflows, but may not
	// resolve an operation (mark it succeeded, authorize a retry, cancel
	// it) or approve one or a workflow step (403 forbidden on the API; the
	// console offers such a session no decision forms). For the workflow
	// tools and workers that do the work, so that an operation that waits
	// for approval, or is uncertain, is settled by a person and not by the
	// automation that recorded it.
	Worker
)

// accessNames are the words of each TokenAccess, in JSON, on the command
// line and in the store.
var accessNames = [...]string{ReadWrite: "read-write", ReadOnly: "read-only", Worker: "worker"}

// known reports whether a is one of the accesses accessNames names.
func (a TokenAccess) known() bool {
	return a >= 0 && int(a) < len(accessNames)
}

// String returns "read-write", "read-only" or "worker".
func (a TokenAccess) String() string {
	if !a.known() {
		return fmt.Sprintf("TokenAccess(%d)", int(a))
	}
	return accessNames[a]
}

// MarshalText encodes the access as its String, for JSON.
func (a TokenAccess) MarshalText() ([]byte, error) {
	if !a.known() {
		return nil, fmt.Errorf("token access %d is not one of read-write, read-only, worker", int(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText reads "read-write", "read-only" or "worker".
func (a *TokenAccess) UnmarshalText(b []byte) error {
	for i, name := range accessNames {
		if string(b) == name {
			*a = TokenAccess(i)
			return nil
		}
	}
	return fmt.Errorf("token access must be read-write, read-only or worker, not %q", b)
}

// TokenInfo describes an API token; the secret itself is never stored.
type TokenInfo struct {
	// ID identifies the token ("tok_" and hex digits): what RevokeToken
	// takes and the timeline names; not a secret.
	ID string `json:"id"`
	// Tenant is the one tenant the token acts for.
	Tenant string `json:"tenant"`
	// Name says what the token is for (CreateToken's name; "token" when
	// it was given none).
	Name string `json:"name"`
	// Access is what the token may do: ReadWrite, ReadOnly or Worker. It
	// never changes.
	Access TokenAccess `json:"access"`
	// CreatedAt is zero for a token read through a console session
	// (Ledger.SessionToken).
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the token was revoked; nil while it is valid.
	RevokedAt *time.Time `json:"revoked_at"`
	// LastUsedAt is when the token was last used (an API request, or a
	// console sign-in), to within TokenUseResolution; nil if never.
	LastUsedAt *time.Time `json:"last_used_at"`
}

// CanWrite reports whether the token may write at all (its Access is
// ReadWrite or Worker).
func (t *TokenInfo) CanWrite() bool {
	return t.Access == ReadWrite || t.Access == Worker
}

// CanDecide reports whether the token may take an operator's decision:
// resolve an operation, approve one or a workflow step (its Access is
// ReadWrite).
func (t *TokenInfo) CanDecide() bool {
	return t.Access == ReadWrite
}

func hashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates an API token for the Ledger's tenant, with the
// access given, and returns the secret, which is shown once: only its
// SHA-256 is stored. The access of a token never changes: revoke it and
// create another. The name says what the token is for (it appears in
// the timeline of the decisions taken with it: TokenInfo.Credential); an
// empty one is "token". A name longer than 200 bytes, or one that is not
// UTF-8 text without NUL bytes, is refused (ErrInvalidInput), and so is
// an access other than ReadWrite, ReadOnly and Worker.
func (l *Ledger) CreateToken(ctx context.Context, name string, access TokenAccess) (secret string, info *TokenInfo, err error) {
	if !access.known() {
		return "", nil, invalidInput("token access must be ReadWrite, ReadOnly or Worker, not %d", int(access))
	}
	if name == "" {
		name = "token"
	}
	if err := checkLength("token name", name, maxNameLength); err != nil {
		return "", nil, err
	}
	if err := checkText("token name", name); err != nil {
		return "", nil, err
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
	tok := &store.Token{ID: "tok_" + hex.EncodeToString(id[:]), Tenant: l.tenant, Name: name, Hash: hashToken(secret), Access: access.String()}
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

// Credential names the token for the decisions taken with it
// (Ledger.WithCredential): "token NAME, ID". The secret is never part of it.
func (t *TokenInfo) Credential() string {
	return "token " + t.Name + ", " + t.ID
}

func tokenInfo(t *store.Token) *TokenInfo {
	return &TokenInfo{ID: t.ID, Tenant: t.Tenant, Name: t.Name, Access: accessOf(t.Access), CreatedAt: t.CreatedAt,
		RevokedAt: timePtr(t.RevokedAt), LastUsedAt: timePtr(t.LastUsedAt)}
}

// accessOf is the access of a token stored with the words of its
// access. Words this release does not know (a newer release's, which the
// schema check would have refused to run on anyway) give the least
// access, ReadOnly.
func accessOf(stored string) TokenAccess {
	var a TokenAccess
	if err := a.UnmarshalText([]byte(stored)); err != nil {
		return ReadOnly
	}
	return a
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
// Requests with it fail from then on through this Ledger, and within
// TokenCheckValidity through every other one sharing the store (another
// server, or the server a command-line revocation is meant for).
// ErrNotFound if no active token has that id.
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
	if err == nil {
		l.checkedTokens.forget()
	}
	return err
}

// TokenCheckValidity is how long a Ledger trusts a token it has found
// active: a server under load then reads each token's row about once a
// second rather than on every request (on PostgreSQL that read cost about a
// quarter of the HTTP API's throughput). So a token revoked by another
// process stops working within this time; unknown and revoked tokens are
// never remembered, and a new token works at once.
const TokenCheckValidity = time.Second

// maxCheckedTokens bounds the tokens a Ledger remembers; past it, it
// forgets them all and checks each again.
const maxCheckedTokens = 4096

// checkedTokens are the tokens a Ledger found active recently, by hash.
type checkedTokens struct {
	mu     sync.Mutex
	byHash map[string]checkedToken
	// forgotten counts the calls of forget. A check that began before
	// the latest one may have read a token before its revocation
	// committed: what it found is not remembered.
	forgotten uint64
}

type checkedToken struct {
	token     TokenInfo
	checkedAt time.Time
}

// lookup returns the token with hash if it was found active less than
// TokenCheckValidity before now (and not after it: a clock set back does
// not extend the trust).
func (c *checkedTokens) lookup(hash string, now time.Time) (TokenInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byHash[hash]
	if !ok {
		return TokenInfo{}, false
	}
	if age := now.Sub(t.checkedAt); age < 0 || age >= TokenCheckValidity {
		delete(c.byHash, hash)
		return TokenInfo{}, false
	}
	return t.token, true
}

// generation is the number of forget calls so far, read before a check
// of the store, for remember.
func (c *checkedTokens) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgotten
}

// remember notes that the token with hash was active at checkedAt, by a
// check that began at generation gen; nothing when forget has been
// called since.
func (c *checkedTokens) remember(hash string, token TokenInfo, checkedAt time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.forgotten {
		return
	}
	if c.byHash == nil || len(c.byHash) >= maxCheckedTokens {
		c.byHash = map[string]checkedToken{}
	}
	c.byHash[hash] = checkedToken{token: token, checkedAt: checkedAt}
}

// forget drops every remembered token.
func (c *checkedTokens) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byHash = nil
	c.forgotten++
}

// Authenticate returns an active token (its tenant, ID, name and access;
// the secret is never kept), or ErrUnauthorized. A token found active is
// trusted for TokenCheckValidity without reading the store again. A
// token read from the store whose last use recorded is older than
// TokenUseResolution has its use recorded, in a write of its own that
// Authenticate does not wait for. The
// caller enforces the access: the HTTP API refuses a ReadOnly token's
// writes and a Worker token's decisions, and so does the console.
func (l *Ledger) Authenticate(ctx context.Context, secret string) (*TokenInfo, error) {
	hash := hashToken(secret)
	// The local clock (through Options.Clock, for tests): reading the
	// store's would cost the round trip this saves.
	now := l.clock(time.Now())
	if t, ok := l.checkedTokens.lookup(hash, now); ok {
		return &t, nil
	}
	gen := l.checkedTokens.generation()
	var tok *store.Token
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		tok, err = activeToken(ctx, r, hash)
		return err
	})
	if err != nil {
		return nil, err
	}
	info := tokenInfo(tok)
	l.checkedTokens.remember(hash, *info, now, gen)
	if tok.LastUsedAt.IsZero() || now.Sub(tok.LastUsedAt) >= TokenUseResolution {
		l.noteTokenUseLater(ctx, tok.ID, now)
	}
	return info, nil
}

// tokenUseRetry is how long after a failed write of a token's use
// Authenticate waits before trying again.
const tokenUseRetry = time.Minute

// tokenUses are the writes of tokens' last use that Authenticate started
// in the background, by token ID: one at a time per token, and after one
// failed, none before tokenUseRetry.
type tokenUses struct {
	mu   sync.Mutex
	byID map[string]tokenUse
}

type tokenUse struct {
	inFlight bool
	// retryAt is when a write that failed may be tried again.
	retryAt time.Time
}

// begin reports whether a write of token id's use may start at now, and
// if so marks it in flight.
func (u *tokenUses) begin(id string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if w, ok := u.byID[id]; ok && (w.inFlight || now.Before(w.retryAt)) {
		return false
	}
	if u.byID == nil || len(u.byID) >= maxCheckedTokens {
		// Only failed writes stay, and only to delay the next: a token
		// written twice at once costs a write, nothing more.
		u.byID = map[string]tokenUse{}
	}
	u.byID[id] = tokenUse{inFlight: true}
	return true
}

// end notes that the write of token id's use begun ended; failed at
// now, it is not tried again before tokenUseRetry.
func (u *tokenUses) end(id string, failed bool, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if failed {
		u.byID[id] = tokenUse{retryAt: now.Add(tokenUseRetry)}
		return
	}
	delete(u.byID, id)
}

// noteTokenUseLater writes that token id is used, in the background:
// bookkeeping never makes a request wait for the write lock (another
// process may hold SQLite's for longer than the busy timeout), and a
// failure to note the use (the store busy, or migrated by a newer
// release) does not refuse the request. Close waits for the write, and
// ends its wait for the store.
func (l *Ledger) noteTokenUseLater(ctx context.Context, id string, now time.Time) {
	if !l.tokenUses.begin(id, now) {
		return
	}
	ctx, done, ok := l.life.start(context.WithoutCancel(ctx))
	if !ok {
		l.tokenUses.end(id, false, now)
		return
	}
	go func() {
		defer done()
		err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return l.noteTokenUse(ctx, tx, id)
		})
		l.tokenUses.end(id, err != nil, l.clock(time.Now()))
	}()
}

// TokenUseResolution is how precisely a token's last use is kept
// (TokenInfo.LastUsedAt): a use is written only when the one recorded is
// older, so that a token in constant use costs one write an hour, not
// one per request. Enough to tell a token in use from one forgotten.
const TokenUseResolution = time.Hour

// noteTokenUse records that the token with id is used now, unless a use
// within TokenUseResolution is recorded already.
func (l *Ledger) noteTokenUse(ctx context.Context, tx store.Tx, id string) error {
	now, err := l.now(ctx, tx)
	if err != nil {
		return err
	}
	return tx.TouchToken(ctx, id, now, now.Add(-TokenUseResolution))
}

// activeToken reads the token whose secret has the SHA-256 hash:
// ErrUnauthorized if there is none or it is revoked.
func activeToken(ctx context.Context, r store.Reader, hash string) (*store.Token, error) {
	t, err := r.TokenByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrUnauthorized
	}
	if err != nil {
		return nil, err
	}
	if !t.RevokedAt.IsZero() {
		return nil, ErrUnauthorized
	}
	return t, nil
}
