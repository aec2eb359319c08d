package reconciler

import "time"

// SetLeaseMargin sets how much longer than its lookup's timeout an
// operation is taken for a lookup (lookupLeaseMargin by default), so that
// a test of a store that hangs need not wait half a minute for the lease.
func (r *Reconciler) SetLeaseMargin(d time.Duration) { r.leaseMargin = d }
