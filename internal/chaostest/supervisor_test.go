package chaostest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChaosSupervisorKillOfReplacedWorker: an in-request kill point whose
// sender was killed by an earlier kill point, and already reaped and
// replaced, found its victim dead: it counts as coalesced, not as a
// request from an unknown process. The workers here are cat, which runs
// until its standard input is closed, as a worker does.
func TestChaosSupervisorKillOfReplacedWorker(t *testing.T) {
	cat, err := exec.LookPath("cat")
	require.NoError(t, err)
	sup := newSupervisor(cat, 1, 1, &logSink{})
	sup.args = func(int, int) []string { return nil }
	require.NoError(t, sup.start())
	stopped := false
	defer func() {
		if !stopped {
			sup.stop(10 * time.Second)
		}
	}()
	sup.mu.Lock()
	first := sup.slots[0].cmd.Process.Pid
	sup.mu.Unlock()

	sup.killRandom() // the only slot: its first generation
	deadline := time.Now().Add(30 * time.Second)
	for sup.counts().restarts == 0 {
		require.True(t, time.Now().Before(deadline), "the killed worker was not restarted: %+v", sup.counts())
		time.Sleep(5 * time.Millisecond) // paces the poll
	}
	sup.mu.Lock()
	second := sup.slots[0].cmd.Process.Pid
	sup.mu.Unlock()
	require.NotEqual(t, first, second, "the slot runs its next generation")

	require.True(t, sup.killPID(first), "a request from the killed and replaced generation")
	require.False(t, sup.killPID(os.Getpid()), "a pid the supervisor never started")
	sup.stop(10 * time.Second)
	stopped = true
	kc := sup.counts()
	require.Equal(t, 1, kc.sent, "SIGKILLs sent: the second kill point sent none")
	require.Equal(t, 1, kc.kills)
	require.Equal(t, 1, kc.coalesced)
	require.Equal(t, 1, kc.restarts)
	require.Empty(t, kc.unexpected, "the replacement stopped cleanly")
}

// supervisor runs the worker processes: it starts one per slot, kills
// them on the destination's schedule and restarts every killed one at once.
type supervisor struct {
	bin string
	// args are the command-line arguments of a slot's generation; set
	// before start.
	args func(slot, gen int) []string
	logs *logSink

	mu       sync.Mutex
	rng      *rand.Rand
	slots    []*slot
	stopping bool
	// sent counts SIGKILLs sent; kills counts workers that died of one;
	// coalesced counts scheduled kills that found their victim already
	// dying (or no live worker) and sent nothing; restarts counts the
	// processes started in place of killed ones.
	sent, kills, coalesced, restarts int
	// unexpected lists exits that nobody asked for.
	unexpected []string
	// killedPIDs are the processes a SIGKILL was sent to. A request that
	// such a process sent before it died can reach the destination after
	// the process was reaped and its slot restarted (see killPID).
	killedPIDs map[int]bool

	wg sync.WaitGroup
}

type slot struct {
	index  int
	gen    int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	killed bool // a SIGKILL was sent to this generation
}

func newSupervisor(bin string, n int, seed uint64, logs *logSink) *supervisor {
	s := &supervisor{bin: bin, logs: logs, rng: rand.New(rand.NewPCG(seed, 0x5c4ed)), killedPIDs: map[int]bool{}}
	for i := range n {
		s.slots = append(s.slots, &slot{index: i})
	}
	return s
}

// start starts every slot's first process.
func (s *supervisor) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.slots {
		if err := s.spawn(sl); err != nil {
			return err
		}
	}
	return nil
}

// spawn starts the next generation of sl and a goroutine that waits for it.
// Call with s.mu held.
func (s *supervisor) spawn(sl *slot) error {
	name := fmt.Sprintf("p%d.g%d", sl.index, sl.gen)
	cmd := exec.Command(s.bin, s.args(sl.index, sl.gen)...)
	cmd.Stderr = s.logs.writer(name)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", name, err)
	}
	sl.cmd, sl.stdin, sl.killed = cmd, stdin, false
	s.wg.Add(1)
	go s.wait(sl, cmd, name)
	return nil
}

// wait reaps one process and restarts its slot if it was killed.
func (s *supervisor) wait(sl *slot, cmd *exec.Cmd, name string) {
	defer s.wg.Done()
	err := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	s.mu.Lock()
	defer s.mu.Unlock()
	killedByUs := sl.cmd == cmd && sl.killed
	switch {
	case killedByUs && ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		s.kills++
	case s.stopping && err == nil:
		return // clean stop
	default:
		s.unexpected = append(s.unexpected, fmt.Sprintf("worker %s exited unexpectedly: %v", name, err))
	}
	if s.stopping || sl.cmd != cmd {
		return
	}
	sl.gen++
	if err := s.spawn(sl); err != nil {
		s.unexpected = append(s.unexpected, fmt.Sprintf("restart of slot %d failed: %v", sl.index, err))
		return
	}
	s.restarts++
}

// killPID sends SIGKILL to the current process of the slot running pid.
//
// The destination reads a request's pid from its body and calls killPID
// only after it made the effect, outside its lock. Meanwhile another
// request may have carried out an earlier kill point that hit the same
// process: a random kill, or an in-request kill of another of its
// goroutines' requests. If that process is still dying, its slot is
// marked killed; if it has been reaped already, the slot runs its next
// generation, and pid is a killed generation's. Either way the scheduled
// kill found its victim dead, and counts as coalesced.
func (s *supervisor) killPID(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	for _, sl := range s.slots {
		if sl.cmd != nil && sl.cmd.Process.Pid == pid {
			if sl.killed {
				s.coalesced++ // an earlier kill got there first
				return true
			}
			s.kill(sl)
			return true
		}
	}
	if s.killedPIDs[pid] {
		s.coalesced++ // killed, reaped and replaced before this kill point
		return true
	}
	return false
}

// kill sends SIGKILL to sl's current process. Call with s.mu held.
func (s *supervisor) kill(sl *slot) {
	sl.killed = true
	s.sent++
	s.killedPIDs[sl.cmd.Process.Pid] = true
	_ = sl.cmd.Process.Kill()
}

// killRandom sends SIGKILL to the current process of a random slot that is
// not already dying.
func (s *supervisor) killRandom() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	var alive []*slot
	for _, sl := range s.slots {
		if !sl.killed {
			alive = append(alive, sl)
		}
	}
	if len(alive) == 0 {
		s.coalesced++
		return
	}
	s.kill(alive[s.rng.IntN(len(alive))])
}

// stop asks every worker to finish (by closing its stdin) and waits for
// them, killing any that is still running after timeout.
func (s *supervisor) stop(timeout time.Duration) {
	s.mu.Lock()
	s.stopping = true
	for _, sl := range s.slots {
		_ = sl.stdin.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		s.mu.Lock()
		for _, sl := range s.slots {
			s.unexpected = append(s.unexpected, fmt.Sprintf("worker p%d.g%d did not stop within %s", sl.index, sl.gen, timeout))
			_ = sl.cmd.Process.Kill()
		}
		s.mu.Unlock()
		<-done
	}
}

// killCounts are the supervisor's figures.
type killCounts struct {
	sent, kills, coalesced, restarts int
	unexpected                       []string
}

func (s *supervisor) counts() killCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return killCounts{sent: s.sent, kills: s.kills, coalesced: s.coalesced, restarts: s.restarts,
		unexpected: append([]string(nil), s.unexpected...)}
}

// logSink collects the workers' standard error, line by line.
type logSink struct {
	mu     sync.Mutex
	lines  []string
	errors int
}

func (l *logSink) writer(name string) io.Writer {
	return &lineWriter{sink: l, prefix: "[" + name + "] "}
}

func (l *logSink) add(prefix, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if isErrorLine(line) {
		l.errors++
	}
	if len(l.lines) < 10000 {
		l.lines = append(l.lines, prefix+line)
	}
}

// isErrorLine reports a worker's error line, or a report of the race
// detector (when the workers are built with -race).
func isErrorLine(line string) bool {
	return strings.HasPrefix(line, "ERROR") || strings.Contains(line, "DATA RACE")
}

// errorLines returns the number of error lines and the first n of them,
// with their worker's name.
func (l *logSink) errorLines(n int) (count int, first []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if _, line, _ := strings.Cut(s, "] "); isErrorLine(line) && len(first) < n {
			first = append(first, s)
		}
	}
	return l.errors, first
}

type lineWriter struct {
	sink   *logSink
	prefix string
	buf    bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.Reset()
			w.buf.WriteString(line) // keep the incomplete line
			return len(p), nil
		}
		w.sink.add(w.prefix, strings.TrimRight(line, "\n"))
	}
}
