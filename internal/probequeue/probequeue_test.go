package probequeue

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// receiver records the answers it is given, and refuses them with err.
type receiver struct {
	mu  sync.Mutex
	got map[*balancer.Peer][]balancer.ProbeAnswer
	err error
	n   chan struct{} // one value per answer
}

func newReceiver() *receiver {
	return &receiver{got: map[*balancer.Peer][]balancer.ProbeAnswer{}, n: make(chan struct{}, 1024)}
}

func (r *receiver) Answer(p *balancer.Peer, a balancer.ProbeAnswer) error {
	r.mu.Lock()
	r.got[p] = append(r.got[p], a)
	err := r.err
	r.mu.Unlock()
	r.n <- struct{}{}
	return err
}

// wait waits for n answers, for at most 5 s.
func (r *receiver) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.n:
		case <-time.After(5 * time.Second):
			t.Fatalf("an answer did not come in 5 s")
		}
	}
}

// steps is a clock that moves by step at each reading.
type steps struct {
	mu   sync.Mutex
	at   time.Time
	step time.Duration
}

func (s *steps) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = s.at.Add(s.step)
	return s.at
}

func TestQueue_answers(t *testing.T) {
	bad := errors.New("no answer")
	tests := []struct {
		name   string
		answer balancer.ProbeAnswer
		err    error
		want   balancer.ProbeAnswer
		stats  Stats
		// lastErr is what Stats.LastError says after the probe of "a:1":
		// nil after an answer, else the peer and the probe's error.
		lastErr error
		lastMsg string
	}{
		{"answer", balancer.ProbeAnswer{InFlight: 3, Latency: 7 * time.Millisecond}, nil,
			// The clock moves 5 ms between the two readings around the probe.
			balancer.ProbeAnswer{InFlight: 3, Latency: 7 * time.Millisecond, RoundTrip: 5 * time.Millisecond},
			Stats{Sent: 1, Answered: 1}, nil, ""},
		{"error", balancer.ProbeAnswer{InFlight: 3}, bad, balancer.ProbeAnswer{Failed: true}, Stats{Sent: 1, Failed: 1},
			bad, "probe of a:1: no answer"},
		{"failed answer", balancer.ProbeAnswer{Failed: true}, nil, balancer.ProbeAnswer{Failed: true}, Stats{Sent: 1, Failed: 1},
			ErrFailed, "probe of a:1: answered Failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &steps{step: 5 * time.Millisecond}
			q, err := New(Config{Workers: 1, Size: 4, Timeout: time.Second, Now: clk.now,
				Probe: func(context.Context, *balancer.Peer) (balancer.ProbeAnswer, error) { return tt.answer, tt.err }})
			require.NoError(t, err)
			r := newReceiver()
			p := balancer.NewPeer("a:1")
			assert.True(t, q.Put(p, r))
			r.wait(t, 1)
			q.Close()
			s := q.Stats()
			assert.Equal(t, []balancer.ProbeAnswer{tt.want}, withoutCause(t, r.got[p], s.LastError))
			if tt.lastErr == nil {
				assert.NoError(t, s.LastError)
			} else {
				assert.ErrorIs(t, s.LastError, tt.lastErr)
				assert.EqualError(t, s.LastError, tt.lastMsg)
			}
			s.LastError = nil
			assert.Equal(t, tt.stats, s)
		})
	}
}

// TestQueue_lastErrorKept: LastError is the latest failure's, kept
// through the answers that follow it, so that a failure seen once is not
// lost to the next success.
func TestQueue_lastErrorKept(t *testing.T) {
	errs := map[string]error{"a:1": errors.New("refused"), "b:2": errors.New("404"), "c:3": nil}
	q, err := New(Config{Workers: 1, Size: 4, Timeout: time.Second,
		Probe: func(_ context.Context, p *balancer.Peer) (balancer.ProbeAnswer, error) {
			return balancer.ProbeAnswer{InFlight: 1}, errs[p.Addr()]
		}})
	require.NoError(t, err)
	r := newReceiver()
	assert.NoError(t, q.Stats().LastError, "before any probe")
	for _, addr := range []string{"a:1", "b:2", "c:3"} {
		q.Put(balancer.NewPeer(addr), r)
		r.wait(t, 1) // one worker: in order
	}
	q.Close()
	s := q.Stats()
	assert.ErrorIs(t, s.LastError, errs["b:2"])
	assert.EqualError(t, s.LastError, "probe of b:2: 404")
	assert.Equal(t, uint64(2), s.Failed)
}

// TestQueue_refused: an answer the receiver refuses (a peer removed since,
// an answer out of range) is counted.
func TestQueue_refused(t *testing.T) {
	q, err := New(Config{Workers: 1, Size: 4, Timeout: time.Second,
		Probe: func(context.Context, *balancer.Peer) (balancer.ProbeAnswer, error) {
			return balancer.ProbeAnswer{InFlight: 1}, nil
		}})
	require.NoError(t, err)
	r := newReceiver()
	r.err = balancer.ErrUnknownPeer
	q.Put(balancer.NewPeer("a:1"), r)
	r.wait(t, 1)
	q.Close()
	assert.Equal(t, Stats{Sent: 1, Answered: 1, Refused: 1}, q.Stats())
}

// TestQueue_timeout: a probe that outlives Timeout sees its context end
// and is answered Failed.
func TestQueue_timeout(t *testing.T) {
	q, err := New(Config{Workers: 1, Size: 4, Timeout: 10 * time.Millisecond,
		Probe: func(ctx context.Context, _ *balancer.Peer) (balancer.ProbeAnswer, error) {
			<-ctx.Done()
			return balancer.ProbeAnswer{}, ctx.Err()
		}})
	require.NoError(t, err)
	r := newReceiver()
	p := balancer.NewPeer("a:1")
	q.Put(p, r)
	r.wait(t, 1)
	q.Close()
	s := q.Stats()
	assert.Equal(t, []balancer.ProbeAnswer{{Failed: true}}, withoutCause(t, r.got[p], s.LastError))
	assert.ErrorIs(t, s.LastError, context.DeadlineExceeded)
	assert.EqualError(t, s.LastError, "probe of a:1: context deadline exceeded")
	s.LastError = nil
	assert.Equal(t, Stats{Sent: 1, Failed: 1}, s)
}

// TestQueue_fullDrops: with the workers busy and the queue full, Put
// returns at once and counts a drop; Close ends the probes in progress
// without answering them, drops what is queued, and leaves no goroutine.
func TestQueue_fullDrops(t *testing.T) {
	before := runtime.NumGoroutine()
	started := make(chan struct{}, 2)
	q, err := New(Config{Workers: 2, Size: 3, Timeout: time.Hour,
		Probe: func(ctx context.Context, _ *balancer.Peer) (balancer.ProbeAnswer, error) {
			started <- struct{}{}
			<-ctx.Done() // until Close
			return balancer.ProbeAnswer{}, ctx.Err()
		}})
	require.NoError(t, err)
	r := newReceiver()
	p := balancer.NewPeer("a:1")
	// 2 taken by the workers, then 3 queued; the next 10 find it full.
	q.Put(p, r)
	q.Put(p, r)
	<-started
	<-started
	for range 3 {
		assert.True(t, q.Put(p, r))
	}
	for range 10 {
		assert.False(t, q.Put(p, r))
	}
	assert.Equal(t, Stats{Sent: 2, Dropped: 10}, q.Stats())
	q.Close()
	q.Close() // idempotent
	assert.False(t, q.Put(p, r), "Put after Close")
	// The 2 in progress and the 3 queued are dropped unanswered, as is
	// the Put after Close.
	assert.Equal(t, Stats{Sent: 2, Dropped: 16}, q.Stats())
	assert.Empty(t, r.got)
	assertGoroutines(t, before)
}

// assertGoroutines fails t unless the goroutines fall back to at most
// want within 5 s (a goroutine that has returned may take a moment to be
// gone from the count).
func assertGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), want, "goroutines left after Close")
}

// TestQueue_putAllocatesNothing: Put, whether it queues or drops, allocates
// nothing.
func TestQueue_putAllocatesNothing(t *testing.T) {
	release := make(chan struct{})
	q, err := New(Config{Workers: 1, Size: 2000, Timeout: time.Hour,
		Probe: func(ctx context.Context, _ *balancer.Peer) (balancer.ProbeAnswer, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return balancer.ProbeAnswer{}, ctx.Err()
		}})
	require.NoError(t, err)
	defer q.Close()
	defer close(release)
	r := newReceiver()
	p := balancer.NewPeer("a:1")
	queued := testing.AllocsPerRun(1000, func() { q.Put(p, r) })
	assert.Zero(t, queued, "Put into the queue")
	for q.Put(p, r) {
	}
	dropped := testing.AllocsPerRun(1000, func() { q.Put(p, r) })
	assert.Zero(t, dropped, "Put into a full queue")
}

// TestQueue_concurrentPutAndClose: Puts racing Close neither block, nor
// panic, nor escape the count: every Put is sent or dropped.
func TestQueue_concurrentPutAndClose(t *testing.T) {
	before := runtime.NumGoroutine()
	q, err := New(Config{Workers: 2, Size: 4, Timeout: time.Second,
		Probe: func(context.Context, *balancer.Peer) (balancer.ProbeAnswer, error) {
			return balancer.ProbeAnswer{InFlight: 1}, nil
		}})
	require.NoError(t, err)
	r := &countingReceiver{}
	p := balancer.NewPeer("a:1")
	const goroutines, puts = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range puts {
				q.Put(p, r)
				if g == 0 && i == puts/2 {
					q.Close()
				}
			}
		})
	}
	wg.Wait()
	q.Close()
	s := q.Stats()
	// Each Put ends answered, failed or dropped (the ones Close cut short
	// were sent, then dropped).
	assert.Equal(t, uint64(goroutines*puts), s.Answered+s.Failed+s.Dropped, "%+v", s)
	assert.LessOrEqual(t, s.Answered+s.Failed, s.Sent, "%+v", s)
	assertGoroutines(t, before)
}

type countingReceiver struct{}

func (r *countingReceiver) Answer(*balancer.Peer, balancer.ProbeAnswer) error { return nil }

func TestNew_badConfig(t *testing.T) {
	ok := func(context.Context, *balancer.Peer) (balancer.ProbeAnswer, error) {
		return balancer.ProbeAnswer{}, nil
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"workers", Config{Workers: 0, Size: 1, Timeout: time.Second, Probe: ok}, "workers 0: out of [1, 1024]"},
		{"many workers", Config{Workers: 1025, Size: 1, Timeout: time.Second, Probe: ok}, "workers 1025: out of [1, 1024]"},
		{"size", Config{Workers: 1, Size: -1, Timeout: time.Second, Probe: ok}, "queue -1: out of [0, 65536]"},
		{"large size", Config{Workers: 1, Size: 65537, Timeout: time.Second, Probe: ok}, "queue 65537: out of [0, 65536]"},
		{"timeout", Config{Workers: 1, Size: 1, Timeout: 0, Probe: ok}, "timeout 0s: out of (0, 1h0m0s]"},
		{"long timeout", Config{Workers: 1, Size: 1, Timeout: 61 * time.Minute, Probe: ok}, "timeout 1h1m0s: out of (0, 1h0m0s]"},
		{"probe", Config{Workers: 1, Size: 1, Timeout: time.Second}, "no probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := New(tt.cfg)
			assert.Nil(t, q)
			assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// TestQueue_nil: a nil peer or receiver is dropped, never handed to a
// worker that would call a nil receiver.
func TestQueue_nil(t *testing.T) {
	q, err := New(Config{Workers: 1, Size: 4, Timeout: time.Second,
		Probe: func(context.Context, *balancer.Peer) (balancer.ProbeAnswer, error) {
			return balancer.ProbeAnswer{}, nil
		}})
	require.NoError(t, err)
	assert.False(t, q.Put(nil, newReceiver()))
	assert.False(t, q.Put(balancer.NewPeer("a:1"), nil))
	q.Close()
	assert.Equal(t, Stats{Dropped: 2}, q.Stats())
}

// withoutCause checks that each Failed answer of got carries the cause
// Stats keeps (lastErr, the latest), and returns got with Err cleared.
func withoutCause(t *testing.T, got []balancer.ProbeAnswer, lastErr error) []balancer.ProbeAnswer {
	t.Helper()
	out := slices.Clone(got)
	for i := range out {
		if out[i].Failed {
			assert.Equal(t, lastErr, out[i].Err, "a Failed answer carries its cause")
			out[i].Err = nil
		}
	}
	return out
}
