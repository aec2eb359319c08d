package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// WorkerArgs configure RunWorker: one attempt made by a separate worker
// process that is killed at its crash point.
type WorkerArgs struct {
	// DSN and Tenant name the ledger.
	DSN, Tenant string
	// Intent is recorded (if new) and claimed; nil claims the next due
	// operation of the tenant instead.
	Intent *opledger.Intent
	// URL is the destination's create endpoint (a simulated destination's
	// Handler, "…/records").
	URL string
	// Crash is where the worker stops and waits to be killed.
	Crash CrashPoint
	// ClockAt is the lab clock's time, which stands still in the worker.
	ClockAt time.Time
	// Lease of the claim. Default 30 s, as in the runner's process.
	Lease time.Duration
}

// Lines a worker process writes to its parent on stdout.
const (
	workerReached = "reached "
	workerRefused = "refused "
)

// RunWorker makes one attempt and stops at a.Crash: it writes "reached
// POINT" to out and then waits, without reporting anything, until wait
// ends (the parent kills the process long before; if the parent goes away
// the worker exits with an error, still without reporting). A claim that
// is refused writes "refused STATE" and returns nil.
func RunWorker(ctx context.Context, a WorkerArgs, out io.Writer, wait io.Reader) error {
	stop := func(p CrashPoint) error {
		if _, err := fmt.Fprintln(out, workerReached+string(p)); err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, wait)
		return fmt.Errorf("worker stopped at %s and was not killed", p)
	}
	if a.Crash == CrashNone {
		return errors.New("lab worker: --crash is required")
	}
	if a.Crash == CrashBeforeClaim {
		return stop(a.Crash)
	}
	if a.Lease <= 0 {
		a.Lease = caseLease
	}
	// The runner's own options (its retry policy above all): a report
	// made here is judged as the runner's would be.
	if a.ClockAt.IsZero() {
		return errors.New("lab worker: --clock-at is required")
	}
	at := a.ClockAt
	l, err := opledger.Open(ctx, a.DSN, caseOptions(a.Tenant, "lab-worker-process-"+strconv.Itoa(os.Getpid()), a.Lease,
		func() time.Time { return at }))
	if err != nil {
		return err
	}
	defer l.Close()
	var c *opledger.Claim
	if a.Intent != nil {
		c, err = l.Claim(ctx, a.Intent.Key, opledger.ClaimOptions{Intent: a.Intent})
	} else {
		c, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{})
		if errors.Is(err, opledger.ErrNothingDue) {
			_, err = fmt.Fprintln(out, workerRefused+"nothing_due")
			return err
		}
	}
	var se *opledger.StateError
	if errors.As(err, &se) {
		_, err = fmt.Fprintln(out, workerRefused+string(se.State))
		return err
	}
	if err != nil {
		return err
	}
	if a.Crash == CrashAfterClaim {
		return stop(a.Crash)
	}
	key := c.Operation.Key
	if _, err := l.Dispatch(ctx, key, c.AttemptID, c.FencingToken); err != nil {
		return err
	}
	if a.Crash == CrashAfterDispatch {
		return stop(a.Crash)
	}
	body, err := json.Marshal(map[string]any{"key": key, "payload": c.Operation.Payload})
	if err != nil {
		return err
	}
	// The call is bounded as a configured destination's is (its default
	// timeout, within the executor's call limit of two thirds of the
	// lease), and the answer is read within that bound too.
	callCtx, cancel := context.WithTimeout(ctx, min(destination.DefaultTimeout, a.Lease*2/3))
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, a.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(IdempotencyHeader, c.IdempotencyKey)
	client := destination.NewClient(nil)
	defer client.CloseIdleConnections()
	resp, callErr := destination.SendHTTP(client, req, destination.HTTPPolicy{ExistsStatus: http.StatusConflict})
	var answer []byte
	if resp != nil {
		answer, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	if a.Crash == CrashAfterEffect {
		return stop(a.Crash)
	}
	res := opledger.Result{Response: answer}
	if callErr == nil {
		var rec struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(answer, &rec)
		res.Ref = rec.ID
	}
	if _, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.ReportOf(res, callErr)); err != nil {
		return err
	}
	return stop(a.Crash)
}

// serveDestination serves the world's destination over HTTP on loopback,
// for worker processes; it is started once per world.
func (w *world) serveDestination() (string, error) {
	if w.destURL != "" {
		return w.destURL, nil
	}
	h, ok := w.dest.(interface{ Handler() http.Handler })
	if !ok {
		return "", fmt.Errorf("destination %s cannot be served over HTTP", w.dest.Name())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	w.closers = append(w.closers, func() {
		_ = srv.Close()
		<-done
	})
	w.destURL = "http://" + ln.Addr().String() + "/records"
	return w.destURL, nil
}

// crashProcess runs the crash in a worker process (w.spawn) and kills it
// with SIGKILL once it reports reaching the crash point.
func (w *world) crashProcess(ctx context.Context, point CrashPoint) (string, error) {
	url, err := w.serveDestination()
	if err != nil {
		return "", err
	}
	args := append([]string(nil), w.spawn[1:]...)
	args = append(args, "--db", w.dsn, "--tenant", w.tenant, "--url", url, "--crash", string(point),
		"--clock-at", w.now().Format(time.RFC3339Nano))
	if !w.workflow {
		in, err := json.Marshal(w.intent(0))
		if err != nil {
			return "", err
		}
		args = append(args, "--intent", string(in))
	}
	cmd := exec.CommandContext(ctx, w.spawn[0], args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	before := w.dest.Counters().Effects // what the worker's call adds
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start worker process: %w", err)
	}
	pid := cmd.Process.Pid
	line, readErr := bufio.NewReader(stdout).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(line, workerReached):
		if err := cmd.Process.Kill(); err != nil {
			return "", fmt.Errorf("kill worker process %d: %w", pid, err)
		}
		_ = cmd.Wait()
	case strings.HasPrefix(line, workerRefused):
		if err := cmd.Wait(); err != nil {
			return "", fmt.Errorf("worker process %d: %v: %s", pid, err, strings.TrimSpace(stderr.String()))
		}
		if strings.TrimPrefix(line, workerRefused) == "nothing_due" {
			// As in the runner's own process: finding nothing is no
			// attempt.
			return nothingDueText, nil
		}
		w.attempts.Add(1)
		return fmt.Sprintf("The worker process's claim was refused (%s), so it exited without doing anything.", strings.TrimPrefix(line, workerRefused)), nil
	default:
		_ = cmd.Process.Kill()
		werr := cmd.Wait()
		return "", fmt.Errorf("worker process %d ended before its crash point (%v, %v): %s", pid, readErr, werr, strings.TrimSpace(stderr.String()))
	}
	killed := fmt.Sprintf(" (worker process %d killed with SIGKILL at %s)", pid, point)
	if point == CrashBeforeClaim {
		return "The worker process died before it reached opledger: nothing was recorded or sent" + killed + ".", nil
	}
	w.attempts.Add(1)
	msg := crashText(point, w.dest.Name(), w.dest.Counters().Effects-before)
	return strings.TrimSuffix(msg, ".") + killed + ".", nil
}

// crashText explains a crash at point; made is how many effects the
// destination made during the worker's call (an injected fault may have
// kept it from acting).
func crashText(point CrashPoint, dest string, made int) string {
	switch point {
	case CrashAfterClaim:
		return "The worker claimed the operation and died before sending anything; its lease will expire."
	case CrashAfterDispatch:
		return "The worker marked the dispatch and died before calling: nothing was sent, but the ledger cannot know that."
	case CrashAfterEffect:
		if made == 0 {
			return fmt.Sprintf("The worker called the %s and died before reporting; the %s made nothing, but only the %s knows that.", dest, dest, dest)
		}
		return fmt.Sprintf("The %s acted and the worker died before reporting: only the %s knows the effect happened.", dest, dest)
	case CrashAfterReport:
		return "The worker reported the outcome and then died: nothing was lost."
	}
	return "The worker died before it reached opledger: nothing was recorded or sent."
}
