package proxy

import "time"

// SetLeaseRenewal makes keepLease extend leases every interval until
// restore: tests cannot wait a third of a real lease.
func SetLeaseRenewal(interval time.Duration) (restore func()) {
	leaseRenewalForTests.Store(int64(interval))
	return func() { leaseRenewalForTests.Store(0) }
}
