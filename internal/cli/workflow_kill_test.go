package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/fakedest"
)

// TestWorkflowSurvivesKill is the task-then-email workflow: the CRM creates
// the task but the server is killed (SIGKILL) before the answer arrives. On
// restart the task is reconciled by lookup (no second task) and the e-mail is
// sent once, with the task's reference in its approved body.
func TestWorkflowSurvivesKill(t *testing.T) {
	t.Parallel()
	crm := fakedest.New(t, fakedest.Options{Unique: true})
	mail := fakedest.New(t, fakedest.Options{})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "destinations.yaml"), []byte(strings.NewReplacer("@CRM@", crm.URL(), "@MAIL@", mail.URL()).Replace(`
destinations:
  - name: crm
    url: @CRM@/records
    body: '{"external_ref": {{json .Key}}, "title": {{json .Payload.title}}}'
    ref: /id
    timeout: 1s
    lookup:
      url: @CRM@/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 1ms
      match:
        - record: /external_ref
          value: "{{.Key}}"
  - name: email
    url: @MAIL@/records
    body: '{"to": "ops-desk", "body": {{json .Payload.body}}}'
    ref: /id
    timeout: 1s
`)), 0o644))
	// Timeouts shorter than the executor's call limit (two thirds of the
	// 2 s --lease below), as serve requires.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "opledger.yaml"), []byte("destinations: destinations.yaml\n"), 0o644))
	dsn := "sqlite:" + filepath.Join(dir, "l.db")
	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "default")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	serve := func() (*exec.Cmd, string) {
		cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--config", filepath.Join(dir, "opledger.yaml"),
			"--lease", "2s", "--sweep-interval", "100ms")
		return cmd, serveURL(t, cmd)
	}

	arrived := crm.Arrivals()
	crm.Fail(fakedest.Hang) // the task is created, the answer never comes
	cmd, url := serve()
	wf := `{"owner":"ops","steps":[
		{"name":"task","action":"crm.create_task","destination":"crm","payload":{"title":"Call back about order 17"}},
		{"name":"email","action":"email.send","destination":"email","payload":{"body":"Task {steps.task.ref} was created for order 17"}}]}`
	req, _ := http.NewRequest(http.MethodPut, url+"/v1/workflows/wf-17", bytes.NewReader([]byte(wf)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the executor never called the CRM")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL), "killed while the CRM call is in flight")
	err = cmd.Wait()
	require.Error(t, err)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the server died of SIGKILL: %v", err)
	require.Equal(t, 1, crm.Effects(), "the CRM made the task")

	cmd, _ = serve() // restart on the same ledger
	l, err := opledger.Open(context.Background(), dsn, opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	deadline := time.Now().Add(90 * time.Second)
	var w *opledger.Workflow
	for tick := time.NewTicker(50 * time.Millisecond); ; <-tick.C {
		w, err = l.GetWorkflow(context.Background(), "wf-17")
		require.NoError(t, err)
		if w.Status == opledger.WorkflowSucceeded {
			break
		}
		require.True(t, time.Now().Before(deadline), "workflow is %s: %s", w.Status, w.Reason)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())

	require.Equal(t, 1, crm.Creates(), "no second task: the lookup found the first")
	require.Equal(t, 1, mail.Creates(), "the e-mail was sent once")
	task, err := l.Get(context.Background(), "wf-17/task")
	require.NoError(t, err)
	tl, err := l.Timeline(context.Background(), "wf-17/task")
	require.NoError(t, err)
	var events []string
	for _, e := range tl {
		events = append(events, e.Event)
	}
	require.Contains(t, events, "lease expired after dispatch")
	require.Contains(t, events, "lookup found the effect")
	email, err := l.Get(context.Background(), "wf-17/email")
	require.NoError(t, err)
	var body struct{ Body string }
	require.NoError(t, json.Unmarshal(email.Payload, &body))
	require.Equal(t, "Task "+task.DestinationRef+" was created for order 17", body.Body, "the approved body, with the task's reference")
}
