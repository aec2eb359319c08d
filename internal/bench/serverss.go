package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// MaxServeRSSOps is the most operations a memory run takes (ServeRSSConfig.Ops):
// the bench keeps each one's latency, 8 bytes apiece.
const MaxServeRSSOps = 100_000_000

// ServeRSSConfig is a memory run of opledger serve: a child process serving
// a fresh ledger, driven through its HTTP API.
type ServeRSSConfig struct {
	// Binary is the opledger executable to run as "opledger serve".
	// Default: this process's own executable (os.Executable).
	Binary string
	// DSN of the store, as for Config.DSN: empty means a fresh SQLite file.
	DSN string
	// Ops is how many protected operations to run through the API: 2 to
	// MaxServeRSSOps.
	Ops int64
	// Concurrency is how many callers run them, closed-loop. Default 32.
	Concurrency int
	// Progress, if set, is told how many operations are done.
	Progress func(done, total int64)
}

// ServeRSSResult is the outcome of a memory run: the resident memory of
// the serve process after half the operations and after all of them.
type ServeRSSResult struct {
	Mode        Mode    `json:"mode"`
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	Ops         int64   `json:"ops"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	// RSSHalfMB is the serve process's VmRSS after Ops/2 operations.
	RSSHalfMB float64 `json:"rss_half_mb"`
	// RSSEndMB is its VmRSS after Ops operations.
	RSSEndMB float64 `json:"rss_end_mb"`
	// RSSGrowthPct is the growth from RSSHalfMB to RSSEndMB, in percent.
	RSSGrowthPct float64 `json:"rss_growth_pct"`
	// RSSPeakMB is the serve process's peak resident memory (VmHWM).
	RSSPeakMB       float64 `json:"rss_peak_mb"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// ServeRSS starts opledger serve as a child process on a fresh ledger and
// a free loopback port, runs cfg.Ops protected operations through its HTTP
// API (claim with the intent inline, then the outcome, as ModeHTTP does),
// reads the child's resident memory from /proc after half of them and after
// all of them, and stops it with SIGTERM. A serve that does not exit 0
// fails the run.
func ServeRSS(ctx context.Context, cfg ServeRSSConfig) (*ServeRSSResult, error) {
	if cfg.Ops < 2 || cfg.Ops > MaxServeRSSOps {
		return nil, fmt.Errorf("serve-rss takes 2 to %d operations (got %d)", MaxServeRSSOps, cfg.Ops)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the opledger executable: %w", err)
		}
		cfg.Binary = exe
	}
	dsn, cleanup, err := freshStore(ctx, cfg.DSN)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	// The ledger is created here, with a token, and closed before serve
	// opens it: the child is the only process using it.
	l, err := opledger.Open(ctx, dsn, opledger.Options{Worker: "bench"})
	if err != nil {
		return nil, err
	}
	store := l.StoreName()
	token, _, err := l.CreateToken(ctx, "bench", opledger.ReadWrite)
	l.Close()
	if err != nil {
		return nil, err
	}
	child, err := startServe(cfg.Binary, dsn)
	if err != nil {
		return nil, err
	}
	defer child.kill()

	viaAPI := apiOperation(client.New(child.url, token, httpClient(cfg.Concurrency)), json.RawMessage(`{"units":2,"order":"BENCH"}`))
	run := randomHex(4)
	var key atomic.Int64
	op := func(ctx context.Context) error {
		return viaAPI(ctx, "bench:"+run+":"+strconv.FormatInt(key.Add(1), 10))
	}
	var done atomic.Int64
	progress := func() {
		if n := done.Add(1); cfg.Progress != nil && n%1000 == 0 {
			cfg.Progress(n, cfg.Ops)
		}
	}
	start := time.Now()
	half := cfg.Ops / 2
	lat1, err := loopN(ctx, cfg.Concurrency, half, op, progress)
	if err != nil {
		return nil, err
	}
	rssHalf := procStatusMB(child.pid(), "VmRSS")
	lat2, err := loopN(ctx, cfg.Concurrency, cfg.Ops-half, op, progress)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	rssEnd := procStatusMB(child.pid(), "VmRSS")
	peak := procStatusMB(child.pid(), "VmHWM")
	if err := child.stop(); err != nil {
		return nil, err
	}
	lats := append(lat1, lat2...)
	r := &ServeRSSResult{Mode: ModeHTTP, Store: store, Concurrency: cfg.Concurrency, Ops: int64(len(lats)),
		OpsPerSec: float64(len(lats)) / elapsed.Seconds(), P50ms: Quantile(lats, 0.50), P99ms: Quantile(lats, 0.99),
		RSSHalfMB: rssHalf, RSSEndMB: rssEnd, RSSPeakMB: peak, DurationSeconds: elapsed.Seconds()}
	if rssHalf > 0 {
		r.RSSGrowthPct = (rssEnd - rssHalf) / rssHalf * 100
	}
	return r, nil
}

// maxPrealloc bounds the latencies loopN makes room for ahead: the rest
// grow as they come, so that a count (a user's) never sizes an
// allocation by itself.
const maxPrealloc = 1 << 16

// loopN runs n calls of fn closed-loop on c goroutines and returns their
// latencies. It stops at the first error.
func loopN(ctx context.Context, c int, n int64, fn func(context.Context) error, each func()) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lats     = make([]time.Duration, 0, min(n, maxPrealloc))
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, min(n/int64(c)+1, maxPrealloc))
			for next.Add(1) <= n && ctx.Err() == nil {
				t0 := time.Now()
				if err := fn(ctx); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					break
				}
				local = append(local, time.Since(t0))
				each()
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return lats, nil
}

// serveChild is an opledger serve child process.
type serveChild struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	err    error // of Wait, once exited is closed
	logs   *tailBuffer
}

// startServe runs binary serve on dsn on a free loopback port and waits
// until it reports its address.
func startServe(binary, dsn string) (*serveChild, error) {
	cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--log-json")
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", binary, err)
	}
	s := &serveChild{cmd: cmd, exited: make(chan struct{}), logs: &tailBuffer{max: 8 << 10}}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = s.logs.Write(line)
			_, _ = s.logs.Write([]byte{'\n'})
			var rec struct{ Msg, URL string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "serving" && rec.URL != "" {
				select {
				case urls <- rec.URL:
				default:
				}
			}
		}
		_, _ = io.Copy(s.logs, stderr)
		s.err = cmd.Wait()
		close(s.exited)
	}()
	select {
	case s.url = <-urls:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("opledger serve exited before serving (%v): %s", s.err, s.logs.String())
	}
}

func (s *serveChild) pid() int { return s.cmd.Process.Pid }

// stop sends SIGTERM and waits for a clean exit (up to a minute).
func (s *serveChild) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		return errors.New("opledger serve did not stop within a minute of SIGTERM")
	}
	if s.err != nil {
		return fmt.Errorf("opledger serve: %v: %s", s.err, s.logs.String())
	}
	return nil
}

// kill ends the child if it still runs.
func (s *serveChild) kill() {
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

// procStatusMB reads a field in kB (VmRSS, VmHWM) of /proc/PID/status, in
// MB; 0 where unavailable.
func procStatusMB(pid int, field string) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
