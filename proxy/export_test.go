package proxy

import (
	"net/http"
	"time"
)

// SetLeaseRenewal makes keepLease extend leases every interval until
// restore: tests cannot wait a third of a real lease.
func SetLeaseRenewal(interval time.Duration) (restore func()) {
	leaseRenewalForTests.Store(int64(interval))
	return func() { leaseRenewalForTests.Store(0) }
}

// OperationKey is the ledger key of callerKey sent through the upstream
// named name with credential (the credential header's one value).
func OperationKey(name, credential, callerKey string) string {
	rt := &route{Upstream: Upstream{Name: name}, credHdr: DefaultCredentialHeader}
	r := &http.Request{Header: http.Header{DefaultCredentialHeader: {credential}}}
	return rt.operationKey(rt.scopeDigest(r), callerKey)
}

// ParseKey is parseKey.
var ParseKey = parseKey
