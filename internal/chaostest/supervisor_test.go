package chaostest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

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
	s := &supervisor{bin: bin, logs: logs, rng: rand.New(rand.NewPCG(seed, 0x5c4ed))}
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
func (s *supervisor) killPID(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	for _, sl := range s.slots {
		if sl.cmd != nil && sl.cmd.Process.Pid == pid {
			if sl.killed {
				s.coalesced++ // a random kill got there first
				return true
			}
			sl.killed = true
			s.sent++
			_ = sl.cmd.Process.Kill()
			return true
		}
	}
	return false
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
	sl := alive[s.rng.IntN(len(alive))]
	sl.killed = true
	s.sent++
	_ = sl.cmd.Process.Kill()
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
