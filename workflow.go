package opledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// A workflow is an ordered list of steps, each an operation keyed
// "<workflow key>/<step name>" (DESIGN.md section 5). A step is recorded
// as an operation only once the step before it has succeeded; until then
// it exists only in the workflow's definition and shows as "waiting". This
// needs no extra operation state, keeps waiting steps out of every work
// queue, and lets a step's payload use earlier steps' results
// ("{steps.create_task.ref}"): they are resolved once, when the step is
// recorded, and frozen in the operation's content like any other payload.

// MaxWorkflowSteps is the largest number of steps a workflow may have.
const MaxWorkflowSteps = 100

// WorkflowStep is one step of a workflow as submitted.
type WorkflowStep struct {
	// Name is unique within the workflow: letters, digits and . _ : -.
	Name string `json:"name"`
	// Action names the change the step's operation makes (Intent.Action).
	Action string `json:"action"`
	// Destination names the external system of the step's operation
	// (Intent.Destination).
	Destination string `json:"destination"`
	// Payload is the step's content, any JSON. Strings may use the results
	// of earlier steps: "{steps.<name>.ref}" (the destination reference),
	// "{steps.<name>.response.<path>}", "{steps.<name>.key}", and
	// "{workflow.key}". A string that is exactly one placeholder takes the
	// value with its JSON type. Other braces are plain text.
	Payload json.RawMessage `json:"payload"`
	// Version of the content; 0 means 1.
	Version int64 `json:"version,omitempty"`
	// RequiresApproval overrides the workflow's RequiresApproval.
	RequiresApproval *bool `json:"requires_approval,omitempty"`
	// Owner overrides the workflow's Owner.
	Owner string `json:"owner,omitempty"`
	// SensitiveFields are payload paths stored but never shown.
	SensitiveFields []string `json:"sensitive_fields,omitempty"`
}

// WorkflowSpec is a workflow as submitted to PutWorkflow.
type WorkflowSpec struct {
	// Steps are the steps in the order they run, 1 to MaxWorkflowSteps.
	Steps []WorkflowStep `json:"steps"`
	// Owner decides for every step when automation cannot.
	Owner string `json:"owner,omitempty"`
	// RequiresApproval makes every step (unless it says otherwise) wait
	// for approval of its exact content.
	RequiresApproval bool `json:"requires_approval,omitempty"`
	// SourceEvent is the event that started the workflow, if any.
	SourceEvent string `json:"source_event,omitempty"`
}

// WorkflowStatus is computed from the states of a workflow's steps.
type WorkflowStatus string

// The statuses of a workflow.
const (
	// WorkflowRunning: the current step is pending, in progress, uncertain
	// (waiting for reconciliation), or due to be recorded.
	WorkflowRunning WorkflowStatus = "running"
	// WorkflowAwaitingApproval: the current step waits for approval.
	WorkflowAwaitingApproval WorkflowStatus = "awaiting_approval"
	// WorkflowHeld: the current step is held for its owner, or cannot be
	// recorded; Reason says why.
	WorkflowHeld WorkflowStatus = "held"
	// WorkflowSucceeded: every step succeeded.
	WorkflowSucceeded WorkflowStatus = "succeeded"
	// WorkflowFailed: the current step failed (rejected, exhausted or
	// cancelled). An operator's authorize_retry or mark_succeeded on the
	// step lets the workflow go on.
	WorkflowFailed WorkflowStatus = "failed"
	// WorkflowCancelled: an operator gave up on the workflow
	// (CancelWorkflow) while its current step had no operation or had
	// failed; its steps not recorded are never recorded. Cancelled says
	// who, when and why.
	WorkflowCancelled WorkflowStatus = "cancelled"
)

// StepState is the state of a workflow step: the state of its operation,
// StepWaiting before the operation is recorded, or StepCancelled when it
// never will be.
type StepState string

// The states of a workflow step that has no operation.
const (
	// StepWaiting: the step's operation is not recorded yet; it will be
	// once the step before it has succeeded.
	StepWaiting StepState = "waiting"
	// StepCancelled: the workflow was cancelled (CancelWorkflow) before
	// the step was recorded; it never runs.
	StepCancelled StepState = "cancelled"
)

// Workflow is a workflow with the state of each step.
type Workflow struct {
	// Tenant is the tenant that owns the workflow.
	Tenant string `json:"tenant"`
	// Key identifies the workflow within its tenant; its steps'
	// operations are keyed "<key>/<step>".
	Key string `json:"key"`
	// Fingerprint is of the steps as first submitted: a PutWorkflow with
	// other steps is refused. Revisions of a step do not change it.
	Fingerprint string `json:"fingerprint"`
	// Status is where the workflow is: running, awaiting_approval, held,
	// succeeded, failed or cancelled, from its current step.
	Status WorkflowStatus `json:"status"`
	// Reason explains the status in a sentence an operator can act on.
	Reason string `json:"reason"`
	// CurrentStep is the first step that has not succeeded.
	CurrentStep string `json:"current_step,omitempty"`
	// Owner is the workflow's owner (WorkflowSpec.Owner), who decides for
	// its steps that name none; empty when none was named.
	Owner string `json:"owner"`
	// SourceEvent is the event that started the workflow
	// (WorkflowSpec.SourceEvent); empty when none did.
	SourceEvent string `json:"source_event,omitempty"`
	// Steps are the steps in order, each as it is now.
	Steps []*WorkflowStepStatus `json:"steps"`
	// CreatedAt is when the workflow was first put, by the ledger's clock.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the workflow last changed: the latest of its own
	// changes (a step recorded, a waiting step revised or approved ahead
	// of its turn, sensitive fields added) and of the UpdatedAt of its
	// recorded steps' operations (a claim, a lease extended, an outcome,
	// a decision, an approval, a revision).
	UpdatedAt time.Time `json:"updated_at"`
	// Cancelled is the operator's decision that ended the workflow
	// (CancelWorkflow), nil unless its status is cancelled.
	Cancelled *WorkflowCancellation `json:"cancelled,omitempty"`
	// HoldCause says why a held workflow's current step cannot be
	// recorded (it has no operation), so that what moves it on can be
	// told apart; empty otherwise (a held workflow whose current step's
	// operation is held for its owner has none).
	HoldCause WorkflowHoldCause `json:"hold_cause,omitempty"`
}

// WorkflowHoldCause is why a held workflow's current step cannot be
// recorded.
type WorkflowHoldCause string

const (
	// WorkflowHoldUnfillable: the step's content reads a reference or a
	// response member an earlier step did not give; revising the step
	// (ReviseWorkflowStep) or cancelling the workflow moves it on.
	WorkflowHoldUnfillable WorkflowHoldCause = "unfillable"
	// WorkflowHoldDestinationNotServing: the step's destination no longer
	// serves the tenant (Options.DestinationTenants changed after the
	// workflow was put); having it serve the tenant again and resuming
	// the workflow, or cancelling it, moves it on. A revision does not:
	// it keeps the step's destination.
	WorkflowHoldDestinationNotServing WorkflowHoldCause = "destination_not_serving"
)

// Step returns the step named name, nil when the workflow has none.
func (w *Workflow) Step(name string) *WorkflowStepStatus {
	for _, st := range w.Steps {
		if st.Name == name {
			return st
		}
	}
	return nil
}

// WorkflowStepStatus is one step of a workflow as it is now.
type WorkflowStepStatus struct {
	// Name is the step's name (WorkflowStep.Name).
	Name string `json:"name"`
	// Key is the step's operation key, "<workflow>/<step>".
	Key string `json:"key"`
	// State is its operation's state once recorded, else StepWaiting or
	// StepCancelled.
	State StepState `json:"state"`
	// WaitingFor names the step that must succeed first, while waiting
	// (not once the workflow is cancelled).
	WaitingFor string `json:"waiting_for,omitempty"`
	// Action and Destination are the step's (WorkflowStep).
	Action      string `json:"action"`
	Destination string `json:"destination"`
	// Version is the operation's content version, or the waiting step's
	// (a revision of the waiting step raises it).
	Version int64 `json:"version"`
	// Fingerprint is the operation's, or for a waiting step that reads no
	// earlier step's result (no placeholder but {workflow.key}) the one it
	// will have (which ApproveWorkflowStep may name).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Payload is the operation's payload, or the waiting step's template;
	// sensitive fields masked.
	Payload json.RawMessage `json:"payload"`
	// RequiresApproval is the recorded operation's RequiresApproval; for
	// a step not recorded yet, whether it will await approval: by its own
	// setting or the workflow's, or because its destination requires one.
	RequiresApproval bool `json:"requires_approval"`
	// PreApprovedBy names who approved a waiting step's exact content.
	PreApprovedBy string `json:"pre_approved_by,omitempty"`
	// RevisedBy names who revised a waiting step's content.
	RevisedBy string `json:"revised_by,omitempty"`
	// Operation is the step's operation once recorded (a tombstone after
	// retention). It is nil for a step that succeeded and whose tombstone
	// has passed its own retention: its State is still succeeded.
	Operation *Operation `json:"operation,omitempty"`
}

// StepError reports a workflow step that cannot be recorded, for example
// because its payload uses a field an earlier step's response lacks, or
// because its destination no longer serves the tenant
// (Options.DestinationTenants changed after the workflow was put: then
// it also matches ErrDestinationNotServed). It matches ErrInvalidInput;
// it names paths, never values.
type StepError struct {
	// Workflow is the workflow's key.
	Workflow string
	// Step is the name of the step that cannot be recorded.
	Step string
	// Err is why: its payload cannot be filled in (a placeholder reads a
	// result an earlier step did not give), its intent is refused as
	// Record would refuse it, or its destination does not serve the
	// tenant.
	Err error
}

// Error names the workflow, the step and the cause.
func (e *StepError) Error() string {
	return fmt.Sprintf("workflow %s step %s: %v", e.Workflow, e.Step, e.Err)
}

// Unwrap returns the underlying cause.
func (e *StepError) Unwrap() error { return e.Err }

// Is matches ErrInvalidInput.
func (e *StepError) Is(target error) bool { return target == ErrInvalidInput }

// workflowRoots are the roots workflow payload templates may use.
var workflowRoots = []string{"steps", "workflow"}

// workflowDef is the stored definition of a workflow.
type workflowDef struct {
	Steps       []stepDef `json:"steps"`
	SourceEvent string    `json:"source_event,omitempty"`
	// Cancelled is set once an operator has cancelled the workflow; the
	// row is then done, at the step it was cancelled at.
	Cancelled *WorkflowCancellation `json:"cancelled,omitempty"`
}

// stepDef is the stored definition of one step, with the revisions and
// pre-approvals made while it was waiting.
type stepDef struct {
	Name             string          `json:"name"`
	Action           string          `json:"action"`
	Destination      string          `json:"destination"`
	Payload          json.RawMessage `json:"payload"`
	Version          int64           `json:"version"`
	RequiresApproval bool            `json:"requires_approval"`
	Owner            string          `json:"owner,omitempty"`
	SensitiveFields  []string        `json:"sensitive_fields,omitempty"`
	RevisedBy        string          `json:"revised_by,omitempty"`
	PreApproval      *Approval       `json:"pre_approval,omitempty"`
}

// WorkflowStepKey is the operation key of a workflow's step.
func WorkflowStepKey(workflowKey, step string) string { return workflowKey + "/" + step }

// SplitWorkflowStepKey splits an operation key into workflow key and step
// name at its last '/'; ok is false for a key without '/'.
func SplitWorkflowStepKey(opKey string) (workflowKey, step string, ok bool) {
	i := strings.LastIndexByte(opKey, '/')
	if i <= 0 || i == len(opKey)-1 {
		return "", "", false
	}
	return opKey[:i], opKey[i+1:], true
}

// validateStepName checks a step name: key syntax without '/'.
func validateStepName(name string) error {
	if name == "" {
		return invalidInput("every step needs a name")
	}
	if strings.Contains(name, "/") {
		return invalidInput("step name must not contain '/'")
	}
	if err := ValidateKey(name); err != nil {
		return invalidInput("step name: %s", strings.TrimPrefix(err.Error(), "invalid key: "))
	}
	return nil
}

// compileStepPayload parses a step payload's templates and checks that they
// only use steps before index i.
func compileStepPayload(payload json.RawMessage, steps []stepDef, i int) (*valueTmpl, error) {
	v, err := decodeJSON(payload)
	if err != nil {
		return nil, invalidInput("step %s: payload is not valid JSON", steps[i].Name)
	}
	vt, err := compileValue(v, workflowRoots, false)
	if err != nil {
		return nil, invalidInput("step %s: payload: %v", steps[i].Name, err)
	}
	for _, p := range vt.placeholders() {
		ref := strings.Join(p, ".")
		if p[0] == "workflow" {
			if len(p) != 2 || p[1] != "key" {
				return nil, invalidInput("step %s: {%s}: only {workflow.key} is known", steps[i].Name, ref)
			}
			continue
		}
		if len(p) < 3 {
			return nil, invalidInput("step %s: {%s}: write {steps.<name>.ref}, {steps.<name>.key} or {steps.<name>.response.<path>}", steps[i].Name, ref)
		}
		earlier := slices.IndexFunc(steps[:i], func(s stepDef) bool { return s.Name == p[1] })
		if earlier < 0 {
			return nil, invalidInput("step %s: {%s} does not name an earlier step", steps[i].Name, ref)
		}
		switch {
		case p[2] == "ref" && len(p) == 3, p[2] == "key" && len(p) == 3, p[2] == "response":
		default:
			return nil, invalidInput("step %s: {%s}: write {steps.<name>.ref}, {steps.<name>.key} or {steps.<name>.response.<path>}", steps[i].Name, ref)
		}
	}
	return vt, nil
}

// knownPayload returns the payload step i of workflow key will be recorded
// with, when it depends on no earlier step: its payload as submitted when
// it has no placeholders, filled as stepIntent fills it when its only
// placeholder is {workflow.key}. ok is false when it reads an earlier
// step's results, known only once that step has succeeded.
func knownPayload(key string, def *workflowDef, i int) (payload json.RawMessage, ok bool) {
	s := def.Steps[i]
	vt, err := compileStepPayload(s.Payload, def.Steps, i)
	if err != nil {
		return nil, false
	}
	ps := vt.placeholders()
	if len(ps) == 0 {
		return s.Payload, true // as stepIntent records it, byte for byte
	}
	if slices.ContainsFunc(ps, func(p []string) bool { return p[0] != "workflow" }) {
		return nil, false
	}
	payload, err = vt.renderJSON(stepContext(key, def, nil, false))
	return payload, err == nil
}

// normalizeSpec checks a submitted workflow and returns its definition and
// fingerprint.
func normalizeSpec(key string, spec WorkflowSpec) (*workflowDef, string, error) {
	if err := ValidateKey(key); err != nil {
		return nil, "", err
	}
	if len(spec.Steps) == 0 || len(spec.Steps) > MaxWorkflowSteps {
		return nil, "", invalidInput("a workflow has 1 to %d steps", MaxWorkflowSteps)
	}
	if err := checkOwnerAndSource(spec.Owner, spec.SourceEvent); err != nil {
		return nil, "", err
	}
	def := &workflowDef{SourceEvent: spec.SourceEvent}
	type fpStep struct {
		Name        string          `json:"name"`
		Action      string          `json:"action"`
		Destination string          `json:"destination"`
		Payload     json.RawMessage `json:"payload"`
		Version     int64           `json:"version"`
	}
	var fpSteps []fpStep
	for _, s := range spec.Steps {
		if err := validateStepName(s.Name); err != nil {
			return nil, "", err
		}
		if slices.ContainsFunc(def.Steps, func(d stepDef) bool { return d.Name == s.Name }) {
			return nil, "", invalidInput("step name %s is used twice", s.Name)
		}
		in := Intent{Key: WorkflowStepKey(key, s.Name), Action: s.Action, Destination: s.Destination,
			Payload: s.Payload, Version: s.Version, Owner: s.Owner, SensitiveFields: s.SensitiveFields}
		if _, err := in.normalize(); err != nil { // syntax of every field
			return nil, "", fmt.Errorf("step %s: %w", s.Name, err)
		}
		d := stepDef{Name: s.Name, Action: in.Action, Destination: in.Destination, Payload: in.Payload,
			Version: in.Version, RequiresApproval: spec.RequiresApproval, Owner: s.Owner,
			SensitiveFields: slices.Clone(s.SensitiveFields)}
		if s.RequiresApproval != nil {
			d.RequiresApproval = *s.RequiresApproval
		}
		def.Steps = append(def.Steps, d)
		if _, err := compileStepPayload(d.Payload, def.Steps, len(def.Steps)-1); err != nil {
			return nil, "", err
		}
		fpSteps = append(fpSteps, fpStep{Name: d.Name, Action: d.Action, Destination: d.Destination, Payload: d.Payload, Version: d.Version})
	}
	doc, err := json.Marshal(struct {
		Steps []fpStep `json:"steps"`
	}{fpSteps})
	if err != nil {
		return nil, "", fmt.Errorf("encode workflow fingerprint: %w", err)
	}
	canon, err := canonicalJSON(doc)
	if err != nil {
		return nil, "", invalidInput("workflow cannot be canonicalized: %v", err)
	}
	sum := sha256.Sum256(canon)
	return def, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// PutWorkflow records a workflow with PUT semantics, in one transaction
// with its first step's operation. A new key is recorded and created is
// true. A repeat with the same steps (same fingerprint) returns the
// workflow as it is now, after recording any step that has become due
// (as ResumeWorkflow). The same key with other steps is refused with a
// *MismatchError (ErrFingerprintMismatch) and nothing changes; a new
// workflow one of whose step keys an operation already has is refused
// with ErrInvalidState.
func (l *Ledger) PutWorkflow(ctx context.Context, key string, spec WorkflowSpec) (w *Workflow, created bool, err error) {
	def, fp, err := normalizeSpec(key, spec)
	if err != nil {
		return nil, false, err
	}
	err = l.workflowTxn(ctx, key, func(ctx context.Context, tx store.Tx) error {
		row, err := tx.GetWorkflow(ctx, l.tenant, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			for i, s := range def.Steps {
				if err := l.served.check(l.tenant, s.Destination); err != nil {
					return fmt.Errorf("step %s: %w", s.Name, err)
				}
				vt, err := compileStepPayload(s.Payload, def.Steps, i)
				if err == nil {
					err = checkMaskable(vt, def.Steps, i)
				}
				if err != nil {
					return err
				}
			}
			if err := l.refuseForeignSteps(ctx, tx, key, def); err != nil {
				return err
			}
			b, err := json.Marshal(def)
			if err != nil {
				return fmt.Errorf("encode workflow: %w", err)
			}
			now, err := l.now(ctx, tx)
			if err != nil {
				return err
			}
			row = &store.Workflow{Tenant: l.tenant, Key: key, Fingerprint: fp, Definition: b, Owner: spec.Owner,
				CurrentKey: WorkflowStepKey(key, def.Steps[0].Name), Revision: 1, CreatedAt: now, UpdatedAt: now}
			if err := tx.InsertWorkflow(ctx, row); err != nil {
				return err
			}
			created = true
		case err != nil:
			return err
		case row.Fingerprint != fp:
			cur, err := l.workflowIn(ctx, tx, row)
			if err != nil {
				return err
			}
			return &MismatchError{Key: key, Stored: row.Fingerprint, Given: fp, State: State(cur.Status)}
		default:
			if err := l.repeatSteps(ctx, tx, row, def); err != nil {
				return err
			}
		}
		// A repeat whose next step cannot be recorded still answers with
		// the workflow: its status says why.
		var se *StepError
		if err := l.advanceIn(ctx, tx, row); err != nil && (created || !errors.As(err, &se)) {
			return err
		}
		w, err = l.workflowIn(ctx, tx, row)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return w, created, nil
}

// refuseForeignSteps refuses a new workflow one of whose step keys an
// operation recorded on its own already has: that operation would become
// the step, and run before its turn with other content. A tombstone there
// is refused too: the workflow would take it for its step, succeeded, and
// skip the step (it is the tombstone of an operation compacted by
// retention, or of a step of a workflow with this key finished and
// forgotten since, whose content the tombstone cannot tell). It first
// locks each step key, in order, as recording an operation at one does
// (txn.refuseWorkflowStep): of the two, the later sees the earlier.
func (l *Ledger) refuseForeignSteps(ctx context.Context, tx store.Tx, key string, def *workflowDef) error {
	stepKeys := make([]string, len(def.Steps))
	for i, s := range def.Steps {
		stepKeys[i] = WorkflowStepKey(key, s.Name)
	}
	for _, k := range slices.Sorted(slices.Values(stepKeys)) {
		if err := tx.LockOperationKey(ctx, l.tenant, k); err != nil {
			return err
		}
	}
	// The same workflow, put concurrently, may have been stored while
	// this waited for the keys: then this is a repeat. It is read before
	// the steps' operations, so that, as in every workflow transaction,
	// the workflow is locked before its steps (an event writing a step's
	// key holds the workflow and waits for the step).
	switch _, err := tx.GetWorkflow(ctx, l.tenant, key); {
	case err == nil:
		return store.ErrConflict
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	for _, s := range def.Steps {
		stepKey := WorkflowStepKey(key, s.Name)
		_, err := tx.GetOperation(ctx, l.tenant, stepKey)
		if errors.Is(err, store.ErrNotFound) {
			switch _, err := tx.GetTombstone(ctx, l.tenant, stepKey); {
			case errors.Is(err, store.ErrNotFound):
				continue
			case err != nil:
				return err
			}
			return fmt.Errorf("%w: workflow %s: step %s has the key of an operation finished and compacted before (%s), recorded on its own or as a step of a workflow with this key forgotten since; "+
				"the workflow would take it for its step and skip the step: give the workflow another key", ErrInvalidState, key, s.Name, stepKey)
		}
		if err != nil {
			return err
		}
		// Or the workflow, put concurrently with other steps, committed
		// since it was read: then this is a put of other steps. (Reading
		// it locks it after the step, the reverse of a workflow's order:
		// a deadlock is a lost race too. A put of the same steps was
		// seen above: it holds these keys' locks until it commits.)
		switch _, err := tx.GetWorkflow(ctx, l.tenant, key); {
		case err == nil:
			return store.ErrConflict
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		return fmt.Errorf("%w: workflow %s: step %s has the key of an operation recorded on its own (%s); give the workflow another key",
			ErrInvalidState, key, s.Name, stepKey)
	}
	return nil
}

// repeatSteps gives the steps of a stored workflow what a repeat of it
// asks for that they lack (neither is part of the fingerprint): the
// sensitive fields it names, and an approval, in the definition for the
// steps still waiting and on the operations of those recorded, as a
// repeated Record does. An approval is required of a recorded step only
// while nothing of it was sent (requireApproval).
func (l *Ledger) repeatSteps(ctx context.Context, tx store.Tx, row *store.Workflow, given *workflowDef) error {
	stored, err := decodeDef(row)
	if err != nil {
		return err
	}
	changed := false
	for i := range stored.Steps {
		s := &stored.Steps[i]
		added := missingFields(s.SensitiveFields, given.Steps[i].SensitiveFields)
		approval := given.Steps[i].RequiresApproval && !s.RequiresApproval
		if len(added) == 0 && !approval {
			continue
		}
		s.SensitiveFields, changed = append(s.SensitiveFields, added...), true
		if approval {
			s.RequiresApproval = true
		}
		if _, _, err := l.decideIn(ctx, tx, l.tenant, WorkflowStepKey(row.Key, s.Name), func(t *txn) error {
			if t.op != nil { // a step not recorded yet takes them from the definition
				t.addSensitiveFields(added, l.worker)
				if approval {
					t.requireApproval("a repeat of workflow "+row.Key+" requires approval", l.worker)
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if !changed {
		return nil
	}
	return l.writeDef(ctx, tx, row, stored)
}

// workflowTxn runs fn in a write transaction, again after a lost race.
func (l *Ledger) workflowTxn(ctx context.Context, key string, fn func(ctx context.Context, tx store.Tx) error) error {
	for range maxConflictRetries {
		err := l.store.Update(ctx, fn)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("workflow %s: gave up after %d write conflicts: %w", key, maxConflictRetries, store.ErrConflict)
}

// getWorkflowRow reads a workflow row and its definition.
func (l *Ledger) getWorkflowRow(ctx context.Context, r store.Reader, key string) (*store.Workflow, *workflowDef, error) {
	row, err := r.GetWorkflow(ctx, l.tenant, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, fmt.Errorf("workflow %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, nil, err
	}
	def, err := decodeDef(row)
	if err != nil {
		return nil, nil, err
	}
	return row, def, nil
}

func decodeDef(row *store.Workflow) (*workflowDef, error) {
	var def workflowDef
	if err := json.Unmarshal(row.Definition, &def); err != nil {
		return nil, fmt.Errorf("decode workflow %s: %w", row.Key, err)
	}
	return &def, nil
}

// stepOperation reads a step's operation or tombstone; nil if neither.
func (l *Ledger) stepOperation(ctx context.Context, r store.Reader, key string) (*Operation, error) {
	op, err := l.get(ctx, r, key)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return op, err
}

// stepContext is what a step's payload template can read: the results of
// the steps before it. With masked, their references and responses are
// as an operator is shown them (Operation.Masked): masked at their
// sensitive paths, where they are a sensitive payload value, and where
// their text contains one.
func stepContext(key string, def *workflowDef, ops []*Operation, masked bool) map[string]any {
	steps := map[string]any{}
	for i, op := range ops {
		if op == nil {
			continue
		}
		if masked {
			op = op.Masked()
		}
		s := map[string]any{"ref": op.DestinationRef, "key": op.Key}
		if resp, err := decodeJSON(op.Response); err == nil && resp != nil {
			s["response"] = resp
		}
		steps[def.Steps[i].Name] = s
	}
	return map[string]any{"steps": steps, "workflow": map[string]any{"key": key}}
}

// checkMaskable refuses, in a new definition, a payload of step i whose
// text takes the reference or a response of an earlier step with
// sensitive fields where no object member holds it (the payload is the
// text, or a list of it): that result may hold their values, shown masked
// there, and no sensitive_fields path can name it to mask it in this
// step. A whole placeholder for a response is let be: an object response
// has paths, and a step whose response turns out not to be one is held
// when it would be recorded (errNoPathToMask). A definition stored before
// is not checked again: its steps are held then, if need be.
func checkMaskable(vt *valueTmpl, steps []stepDef, i int) error {
	for _, t := range vt.unnamed() {
		for _, p := range t.placeholders() {
			if p[0] != "steps" || p[2] == "key" || (p[2] == "response" && t.whole()) {
				continue
			}
			earlier := slices.IndexFunc(steps[:i], func(s stepDef) bool { return s.Name == p[1] })
			if earlier >= 0 && len(steps[earlier].SensitiveFields) > 0 {
				return invalidInput("step %s: payload: {%s} may hold values step %s marks sensitive, and outside an object member no path can name it to mask it: put the value in a field of its own",
					steps[i].Name, strings.Join(p, "."), p[1])
			}
		}
	}
	return nil
}

// inheritedSensitive lists the payload paths of a step, filled by vt from
// the earlier steps' results, whose values an operator is shown masked
// in those steps (masked is their context as Operation.Masked shows it):
// the step keeps them sensitive too, so that a value masked in one step
// is not shown in the next. A path longer than a sensitive field may be
// is cut to the longest ancestor that fits, which masks more, never
// less. A value that no path can name (the payload is itself one
// placeholder, or a text or array holding it; a member name too long for
// a path) would be shown as it is: errNoPathToMask.
func inheritedSensitive(vt *valueTmpl, filled, masked map[string]any) ([]string, error) {
	var out []string
	for _, p := range vt.changedPaths(filled, masked) {
		for len(p) > maxNameLength {
			i := strings.LastIndexByte(p[:maxNameLength+1], '.')
			if i < 0 {
				p = ""
				break
			}
			p = p[:i]
		}
		if p == "" {
			return nil, errNoPathToMask
		}
		out = append(out, p)
	}
	return out, nil
}

// errNoPathToMask: a step's payload takes a value an earlier step shows
// masked where no sensitive_fields path can name it.
var errNoPathToMask = errors.New("payload: takes a value an earlier step shows masked, where no sensitive_fields path can name it to mask it here: put the value in a field of its own (revise the step)")

// stepIntent renders step i into the intent it is recorded as.
func stepIntent(row *store.Workflow, def *workflowDef, i int, earlier []*Operation) (Intent, string, error) {
	s := def.Steps[i]
	vt, err := compileStepPayload(s.Payload, def.Steps, i)
	if err != nil {
		return Intent{}, "", &StepError{Workflow: row.Key, Step: s.Name, Err: err}
	}
	payload := s.Payload // as submitted, byte for byte, when there is nothing to fill
	// A definition stored by an earlier release may list an entry that
	// release took and this one refuses ("to.", an empty segment). It
	// masked nothing there and would mask nothing here: it is left out,
	// rather than hold the workflow when the step's turn comes.
	sensitive := slices.DeleteFunc(slices.Clone(s.SensitiveFields), func(f string) bool { return checkSensitiveField(f) != nil })
	if len(vt.placeholders()) > 0 {
		filled := stepContext(row.Key, def, earlier, false)
		if payload, err = vt.renderJSON(filled); err != nil {
			return Intent{}, "", &StepError{Workflow: row.Key, Step: s.Name, Err: fmt.Errorf("payload: %w", err)}
		}
		inherited, err := inheritedSensitive(vt, filled, stepContext(row.Key, def, earlier, true))
		if err != nil {
			return Intent{}, "", &StepError{Workflow: row.Key, Step: s.Name, Err: err}
		}
		sensitive = append(sensitive, missingFields(sensitive, inherited)...)
	}
	owner := s.Owner
	if owner == "" {
		owner = row.Owner
	}
	in := Intent{Key: WorkflowStepKey(row.Key, s.Name), Action: s.Action, Destination: s.Destination,
		Payload: payload, Version: s.Version, Owner: owner, SourceEvent: def.SourceEvent,
		RequiresApproval: s.RequiresApproval, SensitiveFields: sensitive}
	fp, err := in.normalize()
	if err != nil {
		return Intent{}, "", &StepError{Workflow: row.Key, Step: s.Name, Err: err}
	}
	return in, fp, nil
}

// filledRevision is a revision of step i, already recorded, with its
// payload's placeholders filled from the earlier steps' results as
// stepIntent fills a step's payload when it is recorded: a step is
// recorded once the steps before it are done, so their results are
// known. The paths it fills with values masked in those steps are
// added to its sensitive fields, as stepIntent adds them.
func (l *Ledger) filledRevision(ctx context.Context, tx store.Tx, row *store.Workflow, def *workflowDef, i int, r Revision) (Revision, error) {
	vt, err := compileStepPayload(r.Payload, def.Steps, i)
	if err != nil {
		return r, err
	}
	if len(vt.placeholders()) == 0 {
		return r, nil
	}
	earlier := make([]*Operation, i)
	for j := range earlier {
		if earlier[j], err = l.stepOperation(ctx, tx, WorkflowStepKey(row.Key, def.Steps[j].Name)); err != nil {
			return r, err
		}
	}
	filled := stepContext(row.Key, def, earlier, false)
	payload, err := vt.renderJSON(filled)
	if err != nil {
		return r, &StepError{Workflow: row.Key, Step: def.Steps[i].Name, Err: fmt.Errorf("payload: %w", err)}
	}
	r.Payload = payload
	inherited, err := inheritedSensitive(vt, filled, stepContext(row.Key, def, earlier, true))
	if err != nil {
		return r, &StepError{Workflow: row.Key, Step: def.Steps[i].Name, Err: err}
	}
	r.SensitiveFields = append(slices.Clone(r.SensitiveFields), missingFields(r.SensitiveFields, inherited)...)
	return r, nil
}

// advanceIn records the first step that is due and not recorded, skipping
// steps that succeeded, and updates the workflow row's position. Steps
// already recorded are never recorded again or changed.
func (l *Ledger) advanceIn(ctx context.Context, tx store.Tx, row *store.Workflow) (err error) {
	def, err := decodeDef(row)
	if err != nil {
		return err
	}
	if def.Cancelled != nil {
		return nil // given up on: no step of it is recorded any more
	}
	prevRev := row.Revision
	before := *row
	defer func() {
		if err != nil {
			*row = before // the caller may still show the workflow as it was
		}
	}()
	ops := make([]*Operation, len(def.Steps))
	row.Done = true
	for i, s := range def.Steps {
		key := WorkflowStepKey(row.Key, s.Name)
		op, err := l.stepOperation(ctx, tx, key)
		if err != nil {
			return err
		}
		if op == nil && stepSucceededBefore(&before, def, i) {
			continue // succeeded, and its tombstone has passed retention: never recorded again
		}
		if op == nil {
			if err := l.unservedStep(row.Key, s); err != nil {
				return err
			}
			in, fp, err := stepIntent(row, def, i, ops[:i])
			if err != nil {
				return err
			}
			pre := s.PreApproval
			evidence := fmt.Sprintf("step %d of %d of workflow %s", i+1, len(def.Steps), row.Key)
			if i > 0 {
				evidence += "; step " + def.Steps[i-1].Name + " succeeded"
			}
			_, refusal, err := l.decideIn(ctx, tx, l.tenant, key, func(t *txn) error {
				// Named as a Record is: a first step recorded by a PUT
				// through the API names the token it came with.
				if err := t.recordStep(&in, fp, l.attributed(l.worker)); err != nil {
					return err
				}
				t.note(l.worker, "", "workflow step recorded", evidence)
				if pre != nil && State(t.op.State) == StateAwaitingApproval && pre.Version == in.Version && pre.Fingerprint == fp {
					t.op.ApprovedBy = pre.Approver
					t.move(StatePending, pre.Approver, "", approvedEvent, approvalEvidence(*pre)+approvedWhileWaiting)
					t.op.NotBefore = t.now
				}
				return nil
			})
			if err != nil {
				return err
			}
			if refusal != nil {
				return refusal
			}
		} else if op.State == StateSucceeded {
			ops[i] = op
			continue
		}
		row.Done = false
		row.CurrentStep, row.CurrentKey = i, key
		break
	}
	if row.Done {
		row.CurrentStep, row.CurrentKey = len(def.Steps), ""
	}
	if row.Done == before.Done && row.CurrentStep == before.CurrentStep && row.CurrentKey == before.CurrentKey {
		return nil
	}
	now, err := l.now(ctx, tx)
	if err != nil {
		return err
	}
	row.Revision, row.UpdatedAt = prevRev+1, now
	return tx.UpdateWorkflow(ctx, row, prevRev)
}

// unservedStep refuses, as a *StepError, to record step s of workflow key
// when its destination does not serve the tenant: every step's was
// checked when the workflow was put, but Options.DestinationTenants may
// have changed since. The workflow is then held, as for a step whose
// content cannot be filled, until the destination serves the tenant
// again; nil when it does.
func (l *Ledger) unservedStep(key string, s stepDef) error {
	if err := l.served.check(l.tenant, s.Destination); err != nil {
		return &StepError{Workflow: key, Step: s.Name, Err: err}
	}
	return nil
}

// stepSucceededBefore reports whether the workflow row records step i as
// succeeded: the row moves past a step only once it has succeeded, and a
// succeeded operation stays succeeded. A step so recorded whose operation
// and tombstone have both passed retention is still a step that
// succeeded, not one to record again. A cancelled workflow is done at
// the step it was cancelled at: that step and the ones after it did not
// succeed.
func stepSucceededBefore(row *store.Workflow, def *workflowDef, i int) bool {
	return row.Done && def.Cancelled == nil || i < row.CurrentStep
}

// ResumeWorkflow brings a workflow forward after a crash, a restart, an
// operator's decision or a reconciliation: steps that succeeded are
// skipped (never repeated), the next step is recorded if the step before
// it has succeeded, and nothing recorded is changed — each step runs with
// its stored, approved content. It returns the workflow with its steps'
// states. It is idempotent; the executor also calls it (or
// AdvanceWorkflowOf) after a step succeeds.
func (l *Ledger) ResumeWorkflow(ctx context.Context, key string) (*Workflow, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var w *Workflow
	err := l.workflowTxn(ctx, key, func(ctx context.Context, tx store.Tx) error {
		row, _, err := l.getWorkflowRow(ctx, tx, key)
		if err != nil {
			return err
		}
		if err := l.advanceIn(ctx, tx, row); err != nil {
			return err
		}
		w, err = l.workflowIn(ctx, tx, row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// AdvanceWorkflowOf resumes the workflow that the operation opKey is a
// step of, if any: call it after an operation succeeded (by an attempt, a
// reconciliation or an operator). It returns nil and no error when opKey
// is not a workflow step.
func (l *Ledger) AdvanceWorkflowOf(ctx context.Context, opKey string) (*Workflow, error) {
	wkey, _, ok := SplitWorkflowStepKey(opKey)
	if !ok || ValidateKey(wkey) != nil {
		return nil, nil
	}
	// Any key with a slash splits as a step's: a read first spares the
	// keys of no workflow ("orders/123") the write transaction a resume
	// takes.
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetWorkflow(ctx, l.tenant, wkey)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w, err := l.ResumeWorkflow(ctx, wkey)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return w, err
}

// AdvanceWorkflows resumes, across tenants, every workflow whose current
// step has succeeded, and returns how many moved on. opledger serve runs it
// periodically so that a step that succeeded by reconciliation or by an
// operator's decision still leads to the next one. Workflows whose next
// step cannot be recorded (a *StepError) are skipped: their status says
// why; so are workflows forgotten by retention between the sweep's list
// and their resume. A workflow that cannot be resumed for another reason (a lock
// timeout, a lost connection) does not stop the others: the error counts
// them and gives the first one's cause, with the workflow's key left out
// (the error is meant for a log, and a key may carry personal data); they
// are tried again on the next run.
func (l *Ledger) AdvanceWorkflows(ctx context.Context) (int, error) {
	total := 0
	var failed sweepFailures
	err := sweepPages(ctx, l, func(ctx context.Context, r store.Reader, _ time.Time, after store.OperationID) ([]store.OperationID, error) {
		return r.WorkflowsReady(ctx, "", after, sweepPage)
	}, func(id store.OperationID) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		moved, err := l.advanceWorkflow(ctx, id)
		switch {
		case err != nil:
			failed.add("a workflow", id, err)
		case moved:
			total++
		}
		return nil
	})
	if err != nil {
		return total, fmt.Errorf("advance workflows: %w", err)
	}
	return total, failed.err("advance workflows", "resumed")
}

// advanceWorkflow resumes workflow id for AdvanceWorkflows and reports
// whether it did. A step that cannot move on (a *StepError) is not a
// failure of the sweep, and neither is a workflow that is gone: retention
// may forget a finished one between the sweep's list and its resume (on
// a ledger whose TombstoneRetention is short), and then there is nothing
// left to advance.
func (l *Ledger) advanceWorkflow(ctx context.Context, id store.OperationID) (bool, error) {
	tl := &Ledger{shared: l.shared, tenant: id.Tenant}
	_, err := tl.ResumeWorkflow(ctx, id.Key)
	var se *StepError
	switch {
	case errors.As(err, &se), errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// GetWorkflow returns a workflow with the state of each step and a status
// computed from them. Unknown keys return ErrNotFound.
func (l *Ledger) GetWorkflow(ctx context.Context, key string) (*Workflow, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var w *Workflow
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		row, _, err := l.getWorkflowRow(ctx, r, key)
		if err != nil {
			return err
		}
		w, err = l.workflowIn(ctx, r, row)
		return err
	})
	return w, err
}

// workflowIn builds the workflow view of row, reading its steps with r.
func (l *Ledger) workflowIn(ctx context.Context, r store.Reader, row *store.Workflow) (*Workflow, error) {
	def, err := decodeDef(row)
	if err != nil {
		return nil, err
	}
	w := &Workflow{Tenant: row.Tenant, Key: row.Key, Fingerprint: row.Fingerprint, Status: WorkflowSucceeded,
		Reason: "every step succeeded", Owner: row.Owner, SourceEvent: def.SourceEvent, Steps: []*WorkflowStepStatus{},
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
	ops := make([]*Operation, len(def.Steps))
	decided := false
	for i, s := range def.Steps {
		key := WorkflowStepKey(row.Key, s.Name)
		op, err := l.stepOperation(ctx, r, key)
		if err != nil {
			return nil, err
		}
		ops[i] = op
		st := &WorkflowStepStatus{Name: s.Name, Key: key}
		w.Steps = append(w.Steps, st)
		switch {
		case op == nil && stepSucceededBefore(row, def, i):
			// Succeeded; its record has passed retention.
			st.State = StepState(StateSucceeded)
			st.Action, st.Destination, st.Version = s.Action, s.Destination, s.Version
		case op != nil:
			st.State, st.Operation = StepState(op.State), op
			st.Action, st.Destination, st.Version, st.Fingerprint = op.Action, op.Destination, op.Version, op.Fingerprint
			st.Payload, st.RequiresApproval = MaskPayload(op.Payload, op.SensitiveFields), op.RequiresApproval
			if op.Tombstoned {
				st.Action, st.Destination = s.Action, s.Destination
			}
		default:
			st.State = StepWaiting
			if def.Cancelled != nil {
				st.State = StepCancelled // never recorded: it waits for nothing
			}
			st.Action, st.Destination, st.Version = s.Action, s.Destination, s.Version
			// Recorded in its turn, it waits for approval when its
			// destination requires one, whatever the definition says.
			st.Payload = MaskPayload(s.Payload, s.SensitiveFields)
			st.RequiresApproval = s.RequiresApproval || l.policy.approvalWhy(s.Destination) != ""
			st.RevisedBy = s.RevisedBy
			if s.PreApproval != nil {
				st.PreApprovedBy = s.PreApproval.Approver
			}
			if payload, ok := knownPayload(row.Key, def, i); ok {
				st.Fingerprint, _ = Fingerprint(s.Action, s.Destination, payload, s.Version)
			}
			if i > 0 && st.State == StepWaiting {
				st.WaitingFor = def.Steps[i-1].Name
			}
		}
		if op != nil && op.UpdatedAt.After(w.UpdatedAt) {
			w.UpdatedAt = op.UpdatedAt
		}
		if decided {
			continue
		}
		if st.State == StepState(StateSucceeded) {
			continue
		}
		decided = true
		w.CurrentStep = s.Name
		if op == nil {
			st.WaitingFor = ""
			if l.unservedStep(row.Key, s) != nil {
				w.Status, w.HoldCause, w.Reason = WorkflowHeld, WorkflowHoldDestinationNotServing, fmt.Sprintf("step %s cannot be recorded: destination %q does not serve tenant %q "+
					"(its tenants changed after the workflow was put); serve the tenant from the destination again, then resume the workflow, or give up on it", s.Name, s.Destination, l.tenant)
			} else if _, _, err := stepIntent(row, def, i, ops[:i]); err != nil {
				w.Status, w.HoldCause, w.Reason = WorkflowHeld, WorkflowHoldUnfillable, fmt.Sprintf("step %s cannot be recorded: %v; revise the step", s.Name, errors.Unwrap(err))
			} else {
				w.Status, w.Reason = WorkflowRunning, fmt.Sprintf("step %s is due to be recorded; resume the workflow", s.Name)
			}
			continue
		}
		w.Status, w.Reason, err = l.stepStatus(ctx, r, s.Name, op)
		if err != nil {
			return nil, err
		}
	}
	if c := def.Cancelled; c != nil {
		w.Status, w.Cancelled, w.HoldCause = WorkflowCancelled, c, ""
		w.Reason = fmt.Sprintf("cancelled by %s at step %s: %s; its remaining steps are not recorded", c.Operator, c.Step, c.Reason)
	}
	return w, nil
}

// stepStatus says what the current step's operation means for its
// workflow.
func (l *Ledger) stepStatus(ctx context.Context, r store.Reader, name string, op *Operation) (WorkflowStatus, string, error) {
	switch op.State {
	case StateAwaitingApproval:
		return WorkflowAwaitingApproval, fmt.Sprintf("step %s awaits approval of version %d (%s)", name, op.Version, op.Fingerprint), nil
	case StatePending:
		msg := fmt.Sprintf("step %s is pending", name)
		if op.NotBefore != nil {
			// An approval sets it to the time of the approval: only a
			// time still to come says why nothing claims it yet.
			now, err := l.now(ctx, r)
			if err != nil {
				return "", "", err
			}
			if op.NotBefore.After(now) {
				msg += " (not before " + textTime(*op.NotBefore) + ")"
			}
		}
		return WorkflowRunning, msg, nil
	case StateInProgress:
		return WorkflowRunning, fmt.Sprintf("step %s is in progress (attempt %d)", name, op.AttemptCount), nil
	case StateUncertain:
		return WorkflowRunning, fmt.Sprintf("step %s is uncertain: whether it took effect is not known yet; a reconciler that serves %s looks it up, or a person decides", name, op.Destination), nil
	case StateHeld:
		msg := fmt.Sprintf("step %s is held for %s", name, ownerOrNobody(op.Owner))
		if op.ReviewBy != nil {
			msg += " (review by " + textTime(*op.ReviewBy) + ")"
		}
		tl, secrets, err := l.maskedTimeline(ctx, r, op)
		if err != nil {
			return "", "", err
		}
		for j := len(tl) - 1; j >= 0; j-- {
			if tl[j].ToState == string(StateHeld) {
				msg += ": " + join(tl[j].Event, scrubText(secrets, tl[j].Evidence))
				break
			}
		}
		return WorkflowHeld, msg, nil
	case StateFailed:
		msg := fmt.Sprintf("step %s failed (%s)", name, op.FailureKind)
		if op.FailureKind != FailureCancelled {
			if op.LastError != "" {
				msg += ": " + op.LastError
			}
			return WorkflowFailed, msg, nil
		}
		// Cancelled: the error of an earlier attempt is not why (a
		// rejection, a retry, then a cancellation); the operator's reason
		// on the cancellation is. It is the evidence of the latest move
		// into failed, before any recovery time.
		tl, secrets, err := l.maskedTimeline(ctx, r, op)
		if err != nil {
			return "", "", err
		}
		for j := len(tl) - 1; j >= 0; j-- {
			if tl[j].ToState == string(StateFailed) {
				reason := scrubText(secrets, tl[j].Evidence)
				if i := strings.LastIndex(reason, recoveryTime); i >= 0 && strings.HasSuffix(reason, ")") {
					reason = reason[:i]
				}
				if reason != "" {
					msg += ": " + reason
				}
				break
			}
		}
		return WorkflowFailed, msg, nil
	}
	return WorkflowRunning, fmt.Sprintf("step %s is %s", name, op.State), nil
}

// maskedTimeline is the timeline of op, a workflow step's operation, with
// what masks its evidence at the operation's sensitive fields as they are
// now (Timeline's masking: text stored before a repeat of the workflow
// marked a field sensitive is not rewritten).
func (l *Ledger) maskedTimeline(ctx context.Context, r store.Reader, op *Operation) ([]*store.TimelineEntry, *secretText, error) {
	tl, err := r.ListTimeline(ctx, l.tenant, op.Key)
	if err != nil {
		return nil, nil, err
	}
	secrets, err := l.secretsOf(ctx, r, op.Key)
	return tl, secrets, err
}

func ownerOrNobody(owner string) string {
	if owner == "" {
		return "its owner (none is set)"
	}
	return owner
}

// stepToChange reads, in tx, what a person's change to step of workflow
// key (a revision, an approval) works on: the workflow's row and
// definition, the step's index in it, and its operation (nil while the
// step waits). It refuses a workflow that is cancelled, and a step the
// workflow does not have.
func (l *Ledger) stepToChange(ctx context.Context, tx store.Tx, key, step string) (*store.Workflow, *workflowDef, int, *Operation, error) {
	row, def, err := l.getWorkflowRow(ctx, tx, key)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if def.Cancelled != nil {
		return nil, nil, 0, nil, &cancelledError{workflow: key, c: def.Cancelled}
	}
	i, err := findStep(key, def, step)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	op, err := l.stepOperation(ctx, tx, WorkflowStepKey(key, step))
	if err != nil {
		return nil, nil, 0, nil, err
	}
	return row, def, i, op, nil
}

// findStep returns the index of a step by name.
func findStep(key string, def *workflowDef, step string) (int, error) {
	i := slices.IndexFunc(def.Steps, func(s stepDef) bool { return s.Name == step })
	if i < 0 {
		return 0, fmt.Errorf("workflow %s step %s: %w", key, step, ErrNotFound)
	}
	return i, nil
}

// ReviseWorkflowStep gives a step new content under a higher version; the
// step then awaits approval of exactly that content. A step already
// recorded is revised like Revise (only before any dispatch: afterwards a
// *StateError), its payload's placeholders filled now from the earlier
// steps' results. A waiting step's definition is revised: it will be
// recorded with the new content, awaiting approval, once its turn comes.
// Either payload may use the same placeholders as at PutWorkflow. The
// workflow's fingerprint (of the steps as submitted) does not change.
//
// The revision's SensitiveFields are added to the step's (to its
// operation's, once recorded), as a repeated PutWorkflow adds them.
//
// As with Revise, a revision that repeats the one already made (the same
// version and content by the same actor, of a waiting step or of a
// recorded step that has not been dispatched since, approved or not)
// records nothing and is answered with replayed true.
func (l *Ledger) ReviseWorkflowStep(ctx context.Context, key, step string, r Revision) (w *Workflow, replayed bool, err error) {
	if err := ValidateKey(key); err != nil {
		return nil, false, err
	}
	if err := validateStepName(step); err != nil {
		return nil, false, err
	}
	if err := r.normalize(); err != nil {
		return nil, false, err
	}
	r.Actor = l.attributed(r.Actor)
	err = l.workflowTxn(ctx, key, func(ctx context.Context, tx store.Tx) error {
		replayed = false // a conflict runs this again
		row, def, i, op, err := l.stepToChange(ctx, tx, key, step)
		if err != nil {
			return err
		}
		opKey := WorkflowStepKey(key, step)
		if s := &def.Steps[i]; op != nil && op.AttemptCount == 0 && notDispatched(op) && op.Version == r.Version &&
			s.Version == r.Version && s.RevisedBy == r.Actor && sameContent(s, r.Payload) {
			// This revision was made while the step waited, and the step
			// has been recorded with it since (and perhaps approved; never
			// claimed): the same revision again. Sensitive fields it names
			// now are added, as Revise adds them.
			replayed = true
			if len(missingFields(op.SensitiveFields, r.SensitiveFields)) > 0 {
				_, refusal, err := l.decideIn(ctx, tx, l.tenant, opKey, func(t *txn) error {
					if err := t.need("revise"); err != nil {
						return err
					}
					t.addSensitiveFields(r.SensitiveFields, r.Actor)
					return nil
				})
				if err != nil {
					return err
				}
				if refusal != nil {
					return refusal
				}
			}
		} else if op != nil {
			filled, err := l.filledRevision(ctx, tx, row, def, i, r)
			if err != nil {
				return err
			}
			_, refusal, err := l.decideIn(ctx, tx, l.tenant, opKey, func(t *txn) error {
				var err error
				replayed, err = t.revise(filled, "step "+step+" of workflow "+key)
				return err
			})
			if se := (*StateError)(nil); errors.As(errors.Join(err, refusal), &se) {
				se.step = true // what to do instead differs for a step
			}
			if err != nil {
				return err
			}
			if refusal != nil {
				return refusal
			}
		} else {
			s := &def.Steps[i]
			added := missingFields(s.SensitiveFields, r.SensitiveFields)
			if r.Version <= s.Version {
				if r.Version == s.Version && s.RevisedBy == r.Actor && sameContent(s, r.Payload) {
					replayed = true     // this revision, made before
					if len(added) > 0 { // but for the fields it names now
						s.SensitiveFields = append(slices.Clone(s.SensitiveFields), added...)
						if err := l.writeDef(ctx, tx, row, def); err != nil {
							return err
						}
					}
					w, err = l.workflowIn(ctx, tx, row)
					return err
				}
				return invalidInput("revise needs a version above the current %d", s.Version)
			}
			// Checked as the step will be recorded, as PutWorkflow checks
			// its steps: a payload that cannot be fingerprinted (a name
			// twice in an object, a number beyond a double) would hold
			// the workflow when the step's turn came.
			in := Intent{Key: opKey, Action: s.Action, Destination: s.Destination, Payload: r.Payload, Version: r.Version}
			if _, err := in.normalize(); err != nil {
				return fmt.Errorf("step %s: %w", step, err)
			}
			old := *s
			s.Payload, s.Version, s.RequiresApproval, s.PreApproval, s.RevisedBy = bytes.Clone(r.Payload), r.Version, true, nil, r.Actor
			s.SensitiveFields = append(slices.Clone(s.SensitiveFields), added...)
			vt, err := compileStepPayload(s.Payload, def.Steps, i)
			if err == nil {
				err = checkMaskable(vt, def.Steps, i) // new content, checked as a new definition is
			}
			if err != nil {
				*s = old
				return err
			}
			if err := l.writeDef(ctx, tx, row, def); err != nil {
				return err
			}
		}
		w, err = l.workflowIn(ctx, tx, row)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return w, replayed, nil
}

// notDispatched reports whether op awaits approval, or is pending and
// has never been dispatched: the states in which it can be revised.
func notDispatched(op *Operation) bool {
	return op.State == StateAwaitingApproval || op.State == StatePending && op.FirstDispatchedAt == nil
}

// sameContent reports whether payload is s's payload, compared as the
// fingerprint compares it (canonical JSON).
func sameContent(s *stepDef, payload json.RawMessage) bool {
	a, err := Fingerprint(s.Action, s.Destination, s.Payload, s.Version)
	if err != nil {
		return false
	}
	b, err := Fingerprint(s.Action, s.Destination, payload, s.Version)
	return err == nil && a == b
}

// ApproveWorkflowStep approves exactly one version and fingerprint of a
// step. A recorded step is approved like Approve. A waiting step whose
// payload uses no placeholder but {workflow.key} can be approved ahead of
// its turn (its fingerprint is shown by GetWorkflow): it is then recorded
// as pending, approved, provided its content is still the approved one. A
// waiting step whose payload depends on earlier steps can only be
// approved once recorded (ErrInvalidState).
//
// As with Approve, an approval that repeats the one already given (to the
// recorded step, while nothing has moved it since, or ahead of its turn
// to the waiting step) records nothing and is answered with replayed
// true.
func (l *Ledger) ApproveWorkflowStep(ctx context.Context, key, step string, a Approval) (w *Workflow, replayed bool, err error) {
	if err := ValidateKey(key); err != nil {
		return nil, false, err
	}
	if err := validateStepName(step); err != nil {
		return nil, false, err
	}
	if err := a.validate(); err != nil {
		return nil, false, err
	}
	a.Approver = l.attributed(a.Approver)
	err = l.workflowTxn(ctx, key, func(ctx context.Context, tx store.Tx) error {
		replayed = false // a conflict runs this again
		row, def, i, op, err := l.stepToChange(ctx, tx, key, step)
		if err != nil {
			return err
		}
		opKey := WorkflowStepKey(key, step)
		if op != nil {
			_, refusal, err := l.decideIn(ctx, tx, l.tenant, opKey, func(t *txn) error {
				var err error
				replayed, err = t.approve(a)
				return err
			})
			if err != nil {
				return err
			}
			if refusal != nil {
				return refusal
			}
		} else {
			// No operation, no UpdatedAt: the approval is of the step's
			// content only (Approval.SeenUpdatedAt).
			a.SeenUpdatedAt = time.Time{}
			s := &def.Steps[i]
			if _, err := compileStepPayload(s.Payload, def.Steps, i); err != nil {
				return err
			}
			payload, known := knownPayload(key, def, i)
			if !known {
				return &earlyApprovalError{workflow: key, step: step}
			}
			fp, err := Fingerprint(s.Action, s.Destination, payload, s.Version)
			if err != nil {
				return err
			}
			if a.Version != s.Version || a.Fingerprint != fp {
				return &MismatchError{Key: opKey, Stored: fp, Given: a.Fingerprint, State: State(StepWaiting),
					StoredVersion: s.Version, GivenVersion: a.Version}
			}
			if s.PreApproval != nil && *s.PreApproval == a {
				replayed = true
			} else {
				s.PreApproval = &a
				if err := l.writeDef(ctx, tx, row, def); err != nil {
					return err
				}
			}
		}
		w, err = l.workflowIn(ctx, tx, row)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return w, replayed, nil
}

// earlyApprovalError refuses an approval, ahead of its turn, of a
// waiting step whose content depends on earlier steps: that content is
// only known once the step is recorded. It matches ErrInvalidState.
type earlyApprovalError struct{ workflow, step string }

func (e *earlyApprovalError) Error() string {
	return fmt.Sprintf("step %s of workflow %s cannot be approved before it is recorded: its content depends on earlier steps' results, "+
		"filled in when its turn comes; approve it once it is recorded", e.step, e.workflow)
}

// Is matches ErrInvalidState.
func (e *earlyApprovalError) Is(target error) bool { return target == ErrInvalidState }

// writeDef stores a changed definition.
func (l *Ledger) writeDef(ctx context.Context, tx store.Tx, row *store.Workflow, def *workflowDef) error {
	b, err := json.Marshal(def)
	if err != nil {
		return fmt.Errorf("encode workflow: %w", err)
	}
	now, err := l.now(ctx, tx)
	if err != nil {
		return err
	}
	prev := row.Revision
	row.Definition, row.Revision, row.UpdatedAt = b, prev+1, now
	return tx.UpdateWorkflow(ctx, row, prev)
}

// approve is the approve transition of Ledger.Approve, usable inside a
// larger transaction. It reports whether a repeated the approval that
// last moved the operation, which then records nothing.
func (t *txn) approve(a Approval) (replayed bool, err error) {
	if err := t.need("approve"); err != nil {
		return false, err
	}
	if State(t.op.State) != StateAwaitingApproval {
		if repeat, err := t.repeatsApproval(a); err != nil || repeat {
			return repeat, err
		}
		return false, t.refuse("approve")
	}
	if a.Version != t.op.Version || a.Fingerprint != t.op.Fingerprint {
		return false, &MismatchError{Key: t.key, Stored: t.op.Fingerprint, Given: a.Fingerprint, State: State(t.op.State),
			StoredVersion: t.op.Version, GivenVersion: a.Version}
	}
	if !a.SeenUpdatedAt.IsZero() && !a.SeenUpdatedAt.Equal(t.op.UpdatedAt) {
		return false, t.refused(fmt.Errorf("approve %s: %w: it awaits approval of this content, but was updated at %s and seen as updated at %s",
			t.key, ErrStaleDecision, t.op.UpdatedAt.UTC().Format(time.RFC3339Nano), a.SeenUpdatedAt.UTC().Format(time.RFC3339Nano)))
	}
	t.op.ApprovedBy = a.Approver
	t.move(StatePending, a.Approver, "", approvedEvent, approvalEvidence(a))
	// Due now, unless the destination asked for a wait (Retry-After)
	// that has not passed: an approval of the content does not lift it.
	if t.op.NotBefore.Before(t.now) {
		t.op.NotBefore = t.now
	}
	return false, nil
}

// approvedEvent is the timeline event of an approval.
const approvedEvent = "approved"

// approvedWhileWaiting ends the evidence of an approval given to a
// workflow step before it was recorded.
const approvedWhileWaiting = " (approved while the step was waiting)"

// approvalEvidence is what an approval's timeline entry says: the version
// and fingerprint approved.
func approvalEvidence(a Approval) string {
	return fmt.Sprintf("version %d, %s", a.Version, a.Fingerprint)
}

// repeatsApproval reports whether a repeats the approval that last moved
// the operation: the operation is still as that approval left it, and
// the approval named the same version, fingerprint and approver. Approve
// answers it as a replay.
func (t *txn) repeatsApproval(a Approval) (bool, error) {
	if a.Version != t.op.Version || a.Fingerprint != t.op.Fingerprint || a.Approver != t.op.ApprovedBy {
		return false, nil
	}
	last, err := t.lastMoveBy(approvedEvent, a.Approver)
	if err != nil || last == nil {
		return false, err
	}
	// As stored: scrubbed of the operation's sensitive values, which a
	// fingerprint's hex digits may happen to contain.
	evidence := approvalEvidence(a)
	return last.Evidence == t.scrub(evidence) || last.Evidence == t.scrub(evidence+approvedWhileWaiting), nil
}
