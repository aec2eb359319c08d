package opledger

import (
	"testing"
	"time"
)

// A check that read a token before its revocation committed, and ends
// after RevokeToken's forget, leaves nothing remembered: the token is
// read again, and found revoked, on the next request.
func TestCheckBeganBeforeForgetIsNotRemembered(t *testing.T) {
	var c checkedTokens
	now := time.Now()
	gen := c.generation() // the check begins, and reads the token active
	c.forget()            // meanwhile the revocation commits
	acme := TokenInfo{ID: "tok_1", Tenant: "acme", Name: "n8n"}
	c.remember("h", acme, now, gen)
	if tok, ok := c.lookup("h", now); ok {
		t.Fatalf("a check that began before forget was remembered (tenant %q)", tok.Tenant)
	}
	c.remember("h", acme, now, c.generation())
	if tok, ok := c.lookup("h", now); !ok || tok != acme {
		t.Fatal("a check that began after forget was not remembered")
	}
}
