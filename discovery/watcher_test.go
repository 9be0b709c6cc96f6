package discovery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// script is a Resolver whose answers the test sets, and a Wait that hands
// each wait to the test and returns when the test says.
type script struct {
	mu      sync.Mutex
	res     Result
	err     error
	calls   atomic.Int64
	waits   chan time.Duration
	release chan struct{}
}

func newScript(res Result) *script {
	return &script{res: res, waits: make(chan time.Duration), release: make(chan struct{})}
}

func (s *script) Resolve(ctx context.Context) (Result, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.err
}

func (s *script) set(res Result, err error) {
	s.mu.Lock()
	s.res, s.err = res, err
	s.mu.Unlock()
}

func (s *script) wait(ctx context.Context, d time.Duration) error {
	select {
	case s.waits <- d:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// step ends the current wait and returns the next one's duration, which
// the Watcher asks for once it has applied the lookup in between.
func (s *script) step(t *testing.T) time.Duration {
	t.Helper()
	s.release <- struct{}{}
	select {
	case d := <-s.waits:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the Watcher did not wait again")
		return 0
	}
}

func targets(addrs ...string) Result {
	var ts []Target
	for _, a := range addrs {
		ts = append(ts, Target{Addr: a})
	}
	return Result{Targets: ts, TTL: 30 * time.Second}
}

func addrsOf(b interface{ Peers() []*balancer.Peer }) []string {
	var out []string
	for _, p := range b.Peers() {
		out = append(out, p.Addr())
	}
	return out
}

// start runs a Watcher on s over b and returns it with its first wait.
func start(t *testing.T, b balancer.Updater, s *script, c Config) (*Watcher, time.Duration) {
	t.Helper()
	c.Wait = s.wait
	w, err := Watch(context.Background(), b, s, c)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return w, <-s.waits
}

// TestWatch_followsAnswers: each answer becomes the balancer's list; an
// address kept keeps its peer, with its attempt in flight, which is
// reported after the change.
func TestWatch_followsAnswers(t *testing.T) {
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	s := newScript(targets("10.0.0.1:80", "10.0.0.2:80"))
	w, first := start(t, lb, s, Config{})
	assert.Equal(t, 30*time.Second, first, "the answer's TTL")
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, addrsOf(lb))

	var r balancer.Request
	held, err := lb.Pick(&r)
	require.NoError(t, err)
	s.set(targets("10.0.0.2:80", "10.0.0.1:80", "10.0.0.3:80"), nil)
	s.step(t)
	assert.Equal(t, []string{"10.0.0.2:80", "10.0.0.1:80", "10.0.0.3:80"}, addrsOf(lb))
	for _, p := range lb.Peers() {
		if p.Addr() == held.Addr() {
			assert.Same(t, held, p, "a kept address keeps its peer")
			assert.Equal(t, 1, p.InFlight())
		}
	}
	require.NoError(t, lb.Done(held, balancer.Outcome{}))
	assert.Equal(t, 0, held.InFlight())

	s.set(targets("10.0.0.3:80"), nil)
	s.step(t)
	assert.Equal(t, []string{"10.0.0.3:80"}, addrsOf(lb))
	st := w.Stats()
	assert.Equal(t, uint64(3), st.Lookups)
	assert.Equal(t, uint64(3), st.Updates)
	assert.Zero(t, st.Failures)

	// The same answer again changes nothing.
	s.step(t)
	assert.Equal(t, uint64(3), w.Stats().Updates)
}

// TestWatch_intervals: the next lookup comes after the answer's TTL within
// [MinInterval, MaxInterval], or Interval where the TTL is unknown.
func TestWatch_intervals(t *testing.T) {
	tests := []struct {
		ttl  time.Duration
		c    Config
		want time.Duration
	}{
		{30 * time.Second, Config{}, 30 * time.Second},
		{0, Config{}, 5 * time.Second},
		{0, Config{Interval: 2 * time.Second}, 2 * time.Second},
		{100 * time.Millisecond, Config{}, time.Second},
		{24 * time.Hour, Config{}, 5 * time.Minute},
		{time.Hour, Config{MaxInterval: 10 * time.Minute}, 10 * time.Minute},
		{0, Config{Interval: time.Millisecond, MinInterval: 10 * time.Millisecond}, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.ttl, tt.c.Interval, tt.c.MinInterval, tt.c.MaxInterval), func(t *testing.T) {
			lb, err := balancer.NewRoundRobin(nil)
			require.NoError(t, err)
			res := targets("10.0.0.1:80")
			res.TTL = tt.ttl
			_, first := start(t, lb, newScript(res), tt.c)
			assert.Equal(t, tt.want, first)
		})
	}
}

// TestWatch_failureKeepsList: a failed lookup and an answer with no address
// keep the list in force, are reported and counted, and the retries back
// off 1, 2, 4 s... up to MaxInterval; a good answer brings back the TTL.
func TestWatch_failureKeepsList(t *testing.T) {
	lb, err := balancer.NewLeastConn(nil)
	require.NoError(t, err)
	s := newScript(targets("10.0.0.1:80", "10.0.0.2:80"))
	var reported []error
	w, _ := start(t, lb, s, Config{MaxInterval: 5 * time.Second, OnError: func(err error) { reported = append(reported, err) }})

	servfail := errors.New("server misbehaving")
	s.set(Result{}, servfail)
	var waits []time.Duration
	for range 4 {
		waits = append(waits, s.step(t))
		assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, addrsOf(lb), "the last good list stays")
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}, waits)
	require.Len(t, reported, 4)
	assert.ErrorIs(t, reported[0], servfail)
	assert.ErrorIs(t, w.Stats().LastErr, servfail)

	s.set(Result{TTL: time.Minute}, nil) // no address: NXDOMAIN or no records
	assert.Equal(t, 5*time.Second, s.step(t))
	assert.ErrorIs(t, reported[4], ErrNoAddresses)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, addrsOf(lb))
	assert.Equal(t, uint64(5), w.Stats().Failures)

	s.set(targets("10.0.0.2:80"), nil)
	assert.Equal(t, 5*time.Second, s.step(t), "the TTL, 30s, within MaxInterval")
	assert.Equal(t, []string{"10.0.0.2:80"}, addrsOf(lb))
	assert.NoError(t, w.Stats().LastErr)
	s.set(Result{}, servfail)
	assert.Equal(t, time.Second, s.step(t), "the backoff starts again from RetryInterval")
}

// TestWatch_retryBounds: the wait after a failure stays within
// MaxInterval, the first one too (RetryInterval above it), and doubling it
// never wraps around to a negative wait (MaxInterval near the largest
// duration), which would look up without pause.
func TestWatch_retryBounds(t *testing.T) {
	servfail := errors.New("server misbehaving")
	for _, c := range []Config{
		{MinInterval: 10 * time.Millisecond, MaxInterval: 500 * time.Millisecond},
		{MaxInterval: math.MaxInt64, RetryInterval: 1 << 61},
	} {
		lb, err := balancer.NewLeastConn(nil)
		require.NoError(t, err)
		s := newScript(targets("10.0.0.1:80"))
		w, _ := start(t, lb, s, c)
		s.set(Result{}, servfail)
		prev := time.Duration(0)
		for range 5 {
			d := s.step(t)
			assert.True(t, d >= prev && d > 0 && d <= c.MaxInterval, "wait %v after %v, MaxInterval %v", d, prev, c.MaxInterval)
			prev = d
		}
		require.NoError(t, w.Close())
	}
}

// TestWatch_firstLookupFails: Watch returns the error and leaves the
// balancer as it was.
func TestWatch_firstLookupFails(t *testing.T) {
	lb, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer("10.9.9.9:80")})
	require.NoError(t, err)
	for _, tt := range []struct {
		res  Result
		err  error
		want error
	}{
		{Result{}, errors.New("i/o timeout"), nil},
		{Result{TTL: time.Second}, nil, ErrNoAddresses},
	} {
		s := newScript(tt.res)
		s.err = tt.err
		w, err := Watch(context.Background(), lb, s, Config{Wait: s.wait})
		require.Error(t, err)
		assert.Nil(t, w)
		if tt.want != nil {
			assert.ErrorIs(t, err, tt.want)
		} else {
			assert.ErrorIs(t, err, tt.err)
		}
		assert.Equal(t, []string{"10.9.9.9:80"}, addrsOf(lb))
	}
}

// TestWatch_backups: SRV's lower priorities are backups where the picker
// takes them, and left out, as nginx leaves them, where it refuses them.
func TestWatch_backups(t *testing.T) {
	res := Result{Targets: []Target{{Addr: "10.0.0.1:80", Weight: 3}, {Addr: "10.0.0.2:80", Weight: 1}, {Addr: "10.0.0.9:80", Weight: 1, Backup: true}}}
	smooth, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	start(t, smooth, newScript(res), Config{})
	require.Len(t, smooth.Peers(), 3)
	assert.True(t, smooth.Peers()[2].IsBackup())
	assert.Equal(t, 3, smooth.Peers()[0].Weight())

	hash, err := balancer.NewHash(nil)
	require.NoError(t, err)
	s := newScript(res)
	w, _ := start(t, hash, s, Config{})
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, addrsOf(hash))
	assert.Zero(t, w.Stats().Failures)
	assert.Len(t, w.Stats().Targets, 2)

	// An answer with backups only (the lowest priority's names did not
	// resolve) has nothing left for such a picker: it is no address,
	// and the list stays.
	s.set(Result{Targets: []Target{{Addr: "10.0.0.9:80", Weight: 1, Backup: true}}}, nil)
	s.step(t)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, addrsOf(hash))
	assert.ErrorIs(t, w.Stats().LastErr, ErrNoAddresses)
}

// TestWatch_refusedAnswer: an answer the balancer refuses (the Peer
// template gives a weight out of range) is reported, and the list stays.
func TestWatch_refusedAnswer(t *testing.T) {
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	s := newScript(targets("10.0.0.1:80"))
	var reported []error
	w, _ := start(t, lb, s, Config{
		OnError: func(err error) { reported = append(reported, err) },
		Peer: func(t Target) *balancer.Peer {
			if t.Addr == "10.0.0.66:80" {
				return balancer.NewPeer(t.Addr, balancer.Weight(-1))
			}
			return balancer.NewPeer(t.Addr)
		},
	})
	s.set(targets("10.0.0.1:80", "10.0.0.66:80"), nil)
	assert.Equal(t, time.Second, s.step(t))
	require.Len(t, reported, 1)
	assert.ErrorIs(t, reported[0], balancer.ErrInvalidConfig)
	assert.Contains(t, reported[0].Error(), "the balancer refused the answer")
	assert.Equal(t, []string{"10.0.0.1:80"}, addrsOf(lb))
	assert.Equal(t, uint64(1), w.Stats().Failures)
}

// TestWatch_badConfig: a negative interval or bounds that cross are
// refused, naming the field.
func TestWatch_badConfig(t *testing.T) {
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	for c, want := range map[*Config]string{
		{Interval: -time.Second}: "Config.Interval -1s: negative",
		{Timeout: -1}:            "Config.Timeout -1ns: negative",
		{MinInterval: time.Minute, MaxInterval: time.Second}: "Config.MinInterval 1m0s above MaxInterval 1s",
	} {
		s := newScript(targets("10.0.0.1:80"))
		_, err := Watch(context.Background(), lb, s, *c)
		require.ErrorIs(t, err, balancer.ErrInvalidConfig)
		assert.Contains(t, err.Error(), want)
		assert.Zero(t, s.calls.Load(), "no lookup with a bad config")
	}
}

// TestWatch_stops: Close and the context's end each stop the goroutine,
// and Close may be called twice.
func TestWatch_stops(t *testing.T) {
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	s := newScript(targets("10.0.0.1:80"))
	w, err := Watch(context.Background(), lb, s, Config{Wait: s.wait})
	require.NoError(t, err)
	<-s.waits
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
	assert.Equal(t, int64(1), s.calls.Load())

	ctx, cancel := context.WithCancel(context.Background())
	w, err = Watch(ctx, lb, s, Config{Wait: s.wait})
	require.NoError(t, err)
	<-s.waits
	cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the Watcher did not stop when its context ended")
	}
}

// TestWatch_concurrentPicks: picks and reports race the Watcher's updates
// (a new answer at every step); every attempt is reported, to peers that
// may have left, and none is left in flight.
func TestWatch_concurrentPicks(t *testing.T) {
	lb, err := balancer.NewLeastConn(nil)
	require.NoError(t, err)
	s := newScript(targets("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"))
	start(t, lb, s, Config{})
	var seen sync.Map
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var picks atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var r balancer.Request
				p, err := lb.Pick(&r)
				if err != nil {
					t.Error("pick while the list has peers:", err)
					return
				}
				seen.Store(p, true)
				picks.Add(1)
				if err := lb.Done(p, balancer.Outcome{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 50 {
		s.set(targets(fmt.Sprintf("10.0.0.%d:80", i%7+1), fmt.Sprintf("10.0.0.%d:80", i%5+1)), nil)
		s.step(t)
		// Some picks between two updates, however busy the machine.
		for at, deadline := picks.Load(), time.Now().Add(10*time.Second); picks.Load() == at && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	assert.Positive(t, picks.Load())
	seen.Range(func(k, _ any) bool {
		assert.Zero(t, k.(*balancer.Peer).InFlight(), k.(*balancer.Peer).Addr())
		return true
	})
}

// TestMerge: the targets of every resolver, in order, each with its
// resolver's index; the least TTL of those that have one; one failure or
// empty answer fails the whole.
func TestMerge(t *testing.T) {
	a := Static{{Addr: "10.0.0.1:80"}}
	b := Result{Targets: []Target{{Addr: "10.0.0.2:80", Weight: 3}, {Addr: "10.0.0.3:80", Backup: true}}, TTL: 7 * time.Second}
	c := Result{Targets: []Target{{Addr: "10.0.0.4:80"}}, TTL: 30 * time.Second}
	res, err := Merge(a, newScript(b), newScript(c)).Resolve(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []Target{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80", Weight: 3, Source: 1}, {Addr: "10.0.0.3:80", Backup: true, Source: 1}, {Addr: "10.0.0.4:80", Source: 2}}, res.Targets)
	assert.Equal(t, 7*time.Second, res.TTL)

	res, err = Merge(a, Static{{Addr: "10.0.0.5:80"}}).Resolve(context.Background())
	require.NoError(t, err)
	assert.Zero(t, res.TTL, "no source knows its TTL")

	bad := newScript(Result{})
	bad.err = errors.New("SERVFAIL")
	_, err = Merge(a, bad).Resolve(context.Background())
	assert.ErrorIs(t, err, bad.err)
	_, err = Merge(a, newScript(Result{TTL: time.Second})).Resolve(context.Background())
	assert.ErrorIs(t, err, ErrNoAddresses)
}
