package opledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/opledger/opledger/internal/knownfp"
	"github.com/opledger/opledger/internal/maskonly"
	"github.com/opledger/opledger/internal/store"
)

// Maximum sizes of the text fields of an intent.
const (
	maxNameLength   = 200
	maxReasonLength = 2000
)

// CheckOwner refuses (ErrInvalidInput) an owner Record would refuse:
// longer than 200 bytes, or not UTF-8 text without NUL bytes.
// Configuration that gives operations their owner (an opledger proxy's
// upstream) checks it when it is loaded.
func CheckOwner(owner string) error {
	if len(owner) > maxNameLength {
		return invalidInput("owner is at most %d bytes", maxNameLength)
	}
	return checkText("owner", owner)
}

// checkOwnerAndSource checks the owner and the source event an operation
// or a workflow is recorded with.
func checkOwnerAndSource(owner, sourceEvent string) error {
	if err := CheckOwner(owner); err != nil {
		return err
	}
	if len(sourceEvent) > maxNameLength {
		return invalidInput("source_event is at most %d bytes", maxNameLength)
	}
	return checkText("source_event", sourceEvent)
}

// normalize checks an intent and returns its fingerprint.
func (in *Intent) normalize() (string, error) {
	return in.normalizeKnown(context.Background())
}

// normalizeKnown is normalize taking the fingerprint ctx carries for
// exactly this intent (internal/knownfp: the proxy computed it already)
// instead of computing it again.
func (in *Intent) normalizeKnown(ctx context.Context) (string, error) {
	if err := in.check(); err != nil {
		return "", err
	}
	if fp, ok := knownfp.Lookup(ctx, in.Action, in.Destination, in.Payload, in.Version); ok {
		return fp, nil
	}
	return Fingerprint(in.Action, in.Destination, in.Payload, in.Version)
}

// check checks an intent, defaulting its version and payload.
func (in *Intent) check() error {
	if err := ValidateKey(in.Key); err != nil {
		return err
	}
	if err := checkRequiredName("action", in.Action); err != nil {
		return err
	}
	if err := checkRequiredName("destination", in.Destination); err != nil {
		return err
	}
	if err := checkOwnerAndSource(in.Owner, in.SourceEvent); err != nil {
		return err
	}
	if in.Version == 0 {
		in.Version = 1
	}
	if in.Version < 0 {
		return invalidInput("version must be positive")
	}
	if len(in.Payload) == 0 {
		in.Payload = json.RawMessage("null")
	}
	if err := checkSensitiveFields(in.SensitiveFields); err != nil {
		return err
	}
	if err := checkText("action", in.Action, "destination", in.Destination); err != nil {
		return err
	}
	if err := checkDestinationName(in.Destination); err != nil {
		return err
	}
	return nil
}

// Record records an intent. A new key is recorded as pending, or as
// awaiting_approval when the intent requires approval, and created is true.
// A repeat (same key, same fingerprint) returns the operation as it is now,
// with created false, whatever its state (adding any sensitive fields it
// names that the operation lacks: see Intent.SensitiveFields; and, when
// it requires approval that the operation did not and nothing has been
// dispatched yet, moving the operation to awaiting_approval): a repeat
// of a succeeded operation carries the saved reference and response. The
// same key with another fingerprint is refused with a *MismatchError
// (ErrFingerprintMismatch) and the stored operation is untouched. A repeat of a compacted key is
// recognised from its tombstone.
func (l *Ledger) Record(ctx context.Context, in Intent) (op *Operation, created bool, err error) {
	fp, err := in.normalize()
	if err != nil {
		return nil, false, err
	}
	op, err = l.mutate(ctx, in.Key, func(t *txn) error {
		// Named as decisions are: through the API, the token it came with.
		err := t.record(&in, fp, l.attributed(l.worker))
		created = t.inserted
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return op, created, nil
}

// recordStep is record for a workflow recording its own step.
func (t *txn) recordStep(in *Intent, fp, actor string) error {
	t.recordingStep = true
	return t.record(in, fp, actor)
}

// record is the record transition; on a known key it checks the
// fingerprint. A new key that is a step of a stored workflow is refused
// (see refuseWorkflowStep) unless the workflow records it (recordStep).
func (t *txn) record(in *Intent, fp, actor string) error {
	if t.op != nil {
		if t.op.Fingerprint != fp {
			e := &MismatchError{Key: t.key, Stored: t.op.Fingerprint, Given: fp, State: State(t.op.State)}
			if t.op.Version > in.Version {
				e.RevisedTo = t.op.Version // most likely the first content, revised since
			}
			return e
		}
		t.addSensitiveFields(in.SensitiveFields, actor)
		t.repeatRequiresApproval(in.RequiresApproval, "a repeat of the intent requires approval", actor)
		t.fillOwner(in.Owner, actor)
		return nil
	}
	ts, err := t.getTombstone()
	if err == nil {
		if ts.Fingerprint != fp {
			return &MismatchError{Key: t.key, Stored: ts.Fingerprint, Given: fp, State: State(ts.State), Tombstoned: true}
		}
		t.tombstone = ts
		return nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if !t.recordingStep {
		// A workflow's steps were checked when it was put, and each is
		// again when its turn comes (Ledger.unservedStep): one whose
		// destination stopped serving the tenant holds the workflow.
		if err := t.served.check(t.tenant, in.Destination); err != nil {
			return err
		}
		if err := t.refuseWorkflowStep(); err != nil {
			return err
		}
	}
	state, evidence := StatePending, "version "+strconv.FormatInt(in.Version, 10)+", "+fp
	if why := t.policy.approvalWhy(in.Destination); in.RequiresApproval || why != "" {
		state = StateAwaitingApproval
		if !in.RequiresApproval {
			evidence += "; " + why // the intent did not ask: say what did
		}
	}
	owner := in.Owner
	if owner == "" {
		if owner = t.policy.owner(in.Destination); owner != "" {
			evidence += "; owner " + owner + ", named for destination " + in.Destination
		}
	}
	t.op = &store.Operation{
		Tenant: t.tenant, Key: t.key, Action: in.Action, Destination: in.Destination,
		// A copy: the operation returned must not change when the
		// caller reuses the intent's buffer.
		Version: in.Version, Fingerprint: fp, Payload: bytes.Clone(in.Payload),
		SensitiveFields: slices.Clone(in.SensitiveFields), Owner: owner, SourceEvent: in.SourceEvent,
		RequiresApproval: state == StateAwaitingApproval,
	}
	if extra, ok := t.maskOnly(); ok && len(in.SensitiveFields) > 0 {
		// Content the payload does not hold (the proxy's query values,
		// a body it keeps only as a digest): masked as the payload's
		// sensitive fields are, never shown.
		earlier, err := appendEarlierPayload(nil, extra)
		if err != nil {
			return err
		}
		t.op.EarlierPayloads = earlier
	}
	t.inserted = true
	t.move(state, actor, "", "recorded", evidence)
	if state == StatePending {
		// Due from now on, as an operation due again (a backoff passed,
		// a claim given back, an approval) is from then: ClaimNext takes
		// the one due the longest, and a new operation without a time
		// would pass before every one of them.
		t.op.NotBefore = t.now
	}
	return nil
}

// refuseWorkflowStep refuses to record, on its own, the key of a step of
// a stored workflow (see workflowStepOf). It first locks the key, as
// creating a workflow does for each of its step keys
// (refuseForeignSteps): of the two, the later sees the earlier. Only
// that key is locked, so that records of other keys never wait for it.
func (t *txn) refuseWorkflowStep() error {
	if _, _, ok := SplitWorkflowStepKey(t.key); !ok {
		return nil
	}
	if t.spec != nil {
		return errNotSpeculable // the workflow must be read
	}
	if err := t.tx.LockOperationKey(t.ctx, t.tenant, t.key); err != nil {
		return err
	}
	if t.workflowUnlocked {
		// Checked after the key's lock: a put of a workflow with this
		// step has committed by now, or waits for the lock.
		wk, _, _ := SplitWorkflowStepKey(t.key)
		stored, err := t.tx.WorkflowExists(t.ctx, t.tenant, wk)
		if err != nil {
			return err
		}
		if stored {
			return errPlanOutdated // planned again, it locks the workflow first
		}
		return nil
	}
	w, step, err := workflowStepOf(t.ctx, t.tx, t.tenant, t.key)
	if err != nil || w == nil {
		return err
	}
	return fmt.Errorf("%w: %s is the key of step %s of workflow %s, which records the step itself, in its turn and with its own content; "+
		"record this operation under another key, or revise the step (POST /v1/workflows/{key}/steps/{step}/revise)", ErrInvalidState, t.key, step, w.Key)
}

// workflowStepOf returns the workflow and the step whose key key is, when
// a stored workflow has that step; nil when none has. Such a key is never
// recorded on its own: the workflow records the step itself, each in its
// turn with its own content, and takes whatever is at a step's key for
// the step. Recorded early (by Record, a claim with an intent or an
// event's rule), the step would run before the steps ahead of it, with
// other content and without the approval it may require.
func workflowStepOf(ctx context.Context, r store.Reader, tenant, key string) (workflow *store.Workflow, step string, err error) {
	wk, step, ok := SplitWorkflowStepKey(key)
	if !ok {
		return nil, "", nil
	}
	row, err := r.GetWorkflow(ctx, tenant, wk)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	return stepIn(row, step)
}

// stepIn returns the workflow row and step when the workflow has that
// step; nil when it has not.
func stepIn(row *store.Workflow, step string) (*store.Workflow, string, error) {
	def, err := decodeDef(row)
	if err != nil {
		return nil, "", err
	}
	if !slices.ContainsFunc(def.Steps, func(s stepDef) bool { return s.Name == step }) {
		return nil, "", nil
	}
	return row, step, nil
}

// repeatRequiresApproval makes a repeat of the operation's intent wait
// for an approval, as requireApproval, when the repeat asks for one
// (requested, saying why) or the destination's policy does: a repeat that
// asks for more than the operation has is not answered as if granted.
func (t *txn) repeatRequiresApproval(requested bool, why, actor string) {
	if !requested {
		why = t.policy.approvalWhy(t.op.Destination)
	}
	t.requireApproval(why, actor)
}

// requireApproval makes a recorded operation wait for approval when why
// says it must (a repeat of its intent requires it, or its destination
// does: destinationPolicy.approvalWhy) and the operation did not, while nothing of
// it has been sent yet (pending, never dispatched, as a revision may): a
// repeat never weakens what was recorded, and one that asks for more is
// not silently answered as if granted. Once an attempt has been
// dispatched it is too late; the repeat gets the operation as it is,
// which shows that it requires no approval. An empty why requires
// nothing.
func (t *txn) requireApproval(why, actor string) {
	if why == "" || t.op.RequiresApproval || !t.pendingNeverSent() {
		return
	}
	t.op.RequiresApproval = true
	t.move(StateAwaitingApproval, actor, "", "approval required",
		fmt.Sprintf("%s; version %d awaits it", why, t.op.Version))
}

// fillOwner gives a recorded operation without an owner the one a repeat
// names, so that whoever must decide when automation cannot is named, in
// any state; an owner already recorded is kept (the repeat does not
// reassign it).
func (t *txn) fillOwner(owner, actor string) {
	if owner == "" || t.op.Owner != "" {
		return
	}
	t.op.Owner = owner
	t.dirty = true
	t.note(actor, "", "owner named", "a repeat named the owner "+owner)
}

// pendingNeverSent reports whether the operation is pending and no
// attempt of it was ever dispatched: its content may still change
// (revise) or wait for an approval (requireApproval).
func (t *txn) pendingNeverSent() bool {
	return State(t.op.State) == StatePending && t.op.FirstDispatchedAt.IsZero()
}

// addSensitiveFields adds to a recorded operation the sensitive fields a
// repeat names that it does not have yet. They are not part of the
// fingerprint, so a repeat may mark a field the first recording forgot;
// one that names fewer unmasks nothing.
func (t *txn) addSensitiveFields(fields []string, actor string) {
	added := missingFields(t.op.SensitiveFields, fields)
	if len(added) == 0 {
		return
	}
	t.op.SensitiveFields = append(slices.Clone(t.op.SensitiveFields), added...)
	t.dirty = true
	t.note(actor, "", "sensitive fields added",
		strings.Join(added, ", ")+" marked sensitive; masked from now on")
}

// missingFields returns the fields of given that have lacks, each once.
func missingFields(have, given []string) []string {
	var missing []string
	for _, f := range given {
		if !slices.Contains(have, f) && !slices.Contains(missing, f) {
			missing = append(missing, f)
		}
	}
	return missing
}

// checkDestinationName checks a destination's name against the key syntax,
// as destinations.yaml does: the name labels metrics and log lines, so it
// must not carry free text (an e-mail address, a customer's name).
func checkDestinationName(name string) error {
	if ValidateKey(name) != nil {
		// Not echoed: what was sent there may be just such text.
		return invalidInput("destination names take letters, digits and . _ : / - only, start with a letter or digit, and are at most %d bytes, as in destinations.yaml (crm, mail.eu)", MaxKeyLength)
	}
	return nil
}

// checkSensitiveField checks one entry of sensitive_fields, a dotted path
// ("customer.email"). One that starts with "/" is a JSON pointer, as
// destinations.yaml uses, and would mask nothing: it is refused, so that
// a value meant to be hidden is not shown.
func checkSensitiveField(f string) error {
	switch {
	case f == "" || len(f) > maxNameLength:
		return fmt.Errorf("entries must be non-empty dotted paths (customer.email), at most %d bytes", maxNameLength)
	case strings.HasPrefix(f, "/"):
		return fmt.Errorf("%q is a JSON pointer: entries are dotted paths (customer.email), and a pointer would mask nothing", f)
	case strings.HasPrefix(f, ".") || strings.HasSuffix(f, ".") || strings.Contains(f, ".."): // an empty segment, without splitting f
		return fmt.Errorf("%q has an empty segment: entries are dotted paths of member names (customer.email), and it would mask nothing", f)
	}
	if _, ok := storableText("", f); !ok {
		return errUnstorableEntry
	}
	return nil
}

// errUnstorableEntry is checkSensitiveField's refusal of text the stores
// cannot keep.
var errUnstorableEntry = errors.New("entries must be UTF-8 text without NUL bytes")

// checkSensitiveFields checks every entry (checkSensitiveField), as an
// intent's or a revision's sensitive_fields; text the stores cannot keep
// is refused in the words of every other such field.
func checkSensitiveFields(fields []string) error {
	for _, f := range fields {
		switch err := checkSensitiveField(f); {
		case errors.Is(err, errUnstorableEntry):
			return checkText("sensitive_fields", f)
		case err != nil:
			return invalidInput("sensitive_fields: %s", err)
		}
	}
	return nil
}

// servedTenants is Options.DestinationTenants as sets: the tenants each
// listed destination serves.
type servedTenants map[string]map[string]bool

// newServedTenants checks and indexes Options.DestinationTenants.
func newServedTenants(lists map[string][]string) (servedTenants, error) {
	if len(lists) == 0 {
		return nil, nil
	}
	served := make(servedTenants, len(lists))
	for dest, tenants := range lists {
		if len(tenants) == 0 {
			return nil, invalidInput("DestinationTenants: destination %q lists no tenant: leave it out to serve every tenant", dest)
		}
		if err := checkDestinationName(dest); err != nil {
			return nil, fmt.Errorf("DestinationTenants: %w", err)
		}
		served[dest] = make(map[string]bool, len(tenants))
		for _, tenant := range tenants {
			if err := validateTenant(tenant); err != nil {
				return nil, fmt.Errorf("DestinationTenants: destination %q: %w", dest, err)
			}
			served[dest][tenant] = true
		}
	}
	return served, nil
}

// destinationPolicy is what the Options set, per destination, for the
// operations recorded: the approval they wait for
// (DestinationsRequiringApproval) and the owner they name when their
// intent names none (DestinationOwners).
type destinationPolicy struct {
	approval map[string]bool
	owners   map[string]string
}

// newDestinationPolicy checks and indexes
// Options.DestinationsRequiringApproval and Options.DestinationOwners.
func newDestinationPolicy(approval []string, owners map[string]string) (destinationPolicy, error) {
	p := destinationPolicy{approval: make(map[string]bool, len(approval)), owners: make(map[string]string, len(owners))}
	for _, dest := range approval {
		if err := checkDestinationName(dest); err != nil {
			return p, fmt.Errorf("DestinationsRequiringApproval: %w", err)
		}
		p.approval[dest] = true
	}
	for _, dest := range slices.Sorted(maps.Keys(owners)) { // the first refusal by name, on every run
		owner := owners[dest]
		if err := checkDestinationName(dest); err != nil {
			return p, fmt.Errorf("DestinationOwners: %w", err)
		}
		if strings.TrimSpace(owner) == "" {
			return p, invalidInput("DestinationOwners: destination %q names no owner: leave it out to record its operations with the owner their intent names", dest)
		}
		if err := CheckOwner(owner); err != nil {
			return p, fmt.Errorf("DestinationOwners: destination %q: %w", dest, err)
		}
		p.owners[dest] = owner
	}
	return p, nil
}

// approvalWhy says why an operation for destination must wait for
// approval whatever its intent says, for its timeline; "" when the policy
// does not name the destination.
func (p destinationPolicy) approvalWhy(destination string) string {
	if !p.approval[destination] {
		return ""
	}
	return "destination " + destination + " requires approval of every operation"
}

// owner is the owner a new operation for destination names when its
// intent names none; "" when the policy names none.
func (p destinationPolicy) owner(destination string) string { return p.owners[destination] }

// check refuses a new operation of tenant for destination when the
// destination serves other tenants only.
func (s servedTenants) check(tenant, destination string) error {
	if tenants, limited := s[destination]; limited && !tenants[tenant] {
		return &notServedError{destination: destination, tenant: tenant}
	}
	return nil
}

// maskOnly is the content, for masking only, that the transaction's
// context carries for its key (internal/maskonly).
func (t *txn) maskOnly() ([]byte, bool) {
	if t.ctx == nil {
		return nil, false
	}
	return maskonly.Lookup(t.ctx, t.key)
}
