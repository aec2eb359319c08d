package testdb

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// InsideLine is what a child test started by StartInside prints, on a line
// of its own, once it is inside what it is to be killed in; it then waits
// there, reading its standard input, until it is killed.
const InsideLine = "INSIDE"

// StartInside starts the test binary again to run only the test named
// child, with env added to this process's environment, and returns once
// the child has printed InsideLine. kill ends it with SIGKILL and
// requires that it died of that signal; a child not killed so is killed
// when the test ends.
func StartInside(t *testing.T, child string, env ...string) (kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe() // the child blocks reading it until killed
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		_ = stdin.Close()
	})
	sc := bufio.NewScanner(stdout)
	inside := false
	for !inside && sc.Scan() {
		inside = sc.Text() == InsideLine
	}
	require.True(t, inside, "the child %s never said it was inside", child)
	return func() {
		t.Helper()
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		killed = true
		err := cmd.Wait()
		require.Error(t, err)
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child died of SIGKILL: %v", err)
	}
}
