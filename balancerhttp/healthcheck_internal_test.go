package balancerhttp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// constSource is a rand.Source that always gives one value: 0 makes
// Float64 0, 1<<53-1 makes it the largest below 1.
type constSource uint64

func (s constSource) Uint64() uint64 { return uint64(s) }

const float64Max = 1<<53 - 1

// virtualChecker drives a HealthChecker's loop by hand on virtual time:
// each check answers at once with what result gives for the peer, and the
// SetDown calls the checker makes are logged as "t=<seconds> <peer>
// down|up", t from the start.
type virtualChecker struct {
	*HealthChecker
	start, now time.Time
	result     func(p *balancer.Peer, n int) error // n: the peer's checks so far, from 1
	checks     map[string][]time.Duration          // each peer's check times
	log        []string
}

func newVirtualChecker(t *testing.T, b balancer.Balancer, result func(p *balancer.Peer, n int) error, opts ...HealthOption) *virtualChecker {
	t.Helper()
	h, err := newHealthChecker(b, append([]HealthOption{HealthRand(constSource(0))}, opts...))
	require.NoError(t, err)
	v := &virtualChecker{HealthChecker: h, start: time.Unix(1000, 0), result: result, checks: map[string][]time.Duration{}}
	v.now = v.start
	h.cfg.onChange = func(p *balancer.Peer, down bool) {
		state := "up"
		if down {
			state = "down"
		}
		v.log = append(v.log, fmt.Sprintf("t=%v %s %s", v.now.Sub(v.start).Seconds(), p.Addr(), state))
	}
	h.launch = func(ph *peerHealth) {
		addr := ph.p.Addr()
		v.checks[addr] = append(v.checks[addr], v.now.Sub(v.start))
		h.apply(healthResult{ph, v.result(ph.p, len(v.checks[addr])), v.now})
	}
	return v
}

// runUntil steps the loop to every wake-up before d from the start.
func (v *virtualChecker) runUntil(d time.Duration) {
	for end := v.start.Add(d); v.now.Before(end); {
		next := v.step(v.now)
		if !next.After(v.now) {
			panic("the loop would spin")
		}
		v.now = next
	}
}

var errCheck = errors.New("check failed")

// script gives the n-th check's result from s: 'F' fails, anything else
// passes; past its end, the last.
func script(s string) func(*balancer.Peer, int) error {
	return func(_ *balancer.Peer, n int) error {
		if s[min(n, len(s))-1] == 'F' {
			return errCheck
		}
		return nil
	}
}

// TestHealthChecker_riseFall checks the rise and fall counts on one peer
// checked every second, no jitter, first check at 0 (the source gives 0),
// so check n runs at t = n-1 s: the peer goes down at the check that makes
// Fall failures in a row and up at the one that makes Rise passes in a
// row after it.
func TestHealthChecker_riseFall(t *testing.T) {
	tests := []struct {
		name       string
		rise, fall int
		script     string
		want       []string
	}{
		{"HAProxy's 2 and 3", 2, 3, "FFSFFFSFSSS", []string{"t=5 a down", "t=9 a up"}},
		{"never three in a row", 2, 3, "FFSFFSFFSS", nil},
		{"nginx Plus's 1 and 1", 1, 1, "SFSFFS", []string{"t=1 a down", "t=2 a up", "t=3 a down", "t=5 a up"}},
		{"rise 3", 3, 1, "FSSFSSSF", []string{"t=0 a down", "t=6 a up", "t=7 a down"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a")})
			require.NoError(t, err)
			v := newVirtualChecker(t, b, script(tc.script), HealthInterval(time.Second), HealthJitter(0), HealthRise(tc.rise), HealthFall(tc.fall))
			v.runUntil(time.Duration(len(tc.script)) * time.Second)
			assert.Equal(t, tc.want, v.log)
			want := make([]time.Duration, len(tc.script))
			for i := range want {
				want[i] = time.Duration(i) * time.Second
			}
			assert.Equal(t, want, v.checks["a"], "one check a second")
			down := len(tc.want) % 2 // the changes alternate, down first
			assert.Equal(t, down == 1, b.Peers()[0].IsDown())
			st := v.Stats()
			require.ErrorIs(t, st.LastError, errCheck, "the last failure")
			assert.Contains(t, st.LastError.Error(), "health check of a: ")
			st.LastError = nil
			assert.Equal(t, HealthStats{Checks: uint64(len(tc.script)), Failed: uint64(strings.Count(tc.script, "F")), Down: down}, st)
			assert.Zero(t, b.Peers()[0].Stats().Attempts, "checks are not traffic")
		})
	}
}

// TestHealthChecker_jitter checks the times between checks: interval ×
// (1 + jitter × (2u - 1)) for the source's u in [0, 1), so 0.8 s with u =
// 0 and jitter 0.2, just under 1.2 s (rounded to 1.2 s) with u just under
// 1; the first check at u × interval. With a real source the intervals
// spread over [0.8, 1.2) s and the first checks of 200 peers over [0, 1) s.
func TestHealthChecker_jitter(t *testing.T) {
	pass := func(*balancer.Peer, int) error { return nil }
	opts := []HealthOption{HealthInterval(time.Second), HealthJitter(0.2)}
	for _, tc := range []struct {
		name       string
		src        uint64
		first, gap time.Duration
	}{{"u = 0", 0, 0, 800 * time.Millisecond}, {"u near 1", float64Max, time.Second - 1, 1200 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a")})
			require.NoError(t, err)
			v := newVirtualChecker(t, b, pass, append(opts, HealthRand(constSource(tc.src)))...)
			v.runUntil(10 * time.Second)
			c := v.checks["a"]
			require.NotEmpty(t, c)
			assert.Equal(t, tc.first, c[0])
			for i := 1; i < len(c); i++ {
				assert.Equal(t, tc.gap, c[i]-c[i-1], "gap %d", i)
			}
		})
	}

	t.Run("real source", func(t *testing.T) {
		peers := make([]*balancer.Peer, 200)
		for i := range peers {
			peers[i] = balancer.NewPeer(fmt.Sprintf("p%d", i))
		}
		b, err := balancer.NewRoundRobin(peers)
		require.NoError(t, err)
		v := newVirtualChecker(t, b, pass, append(opts, HealthRand(rand.NewPCG(1, 2)))...)
		v.runUntil(20 * time.Second)
		var firsts, gaps []time.Duration
		for _, c := range v.checks {
			firsts = append(firsts, c[0])
			for i := 1; i < len(c); i++ {
				gaps = append(gaps, c[i]-c[i-1])
			}
		}
		require.Len(t, firsts, 200)
		for _, g := range gaps {
			require.True(t, g >= 800*time.Millisecond && g <= 1200*time.Millisecond, "gap %v", g)
		}
		for _, f := range firsts {
			require.True(t, f >= 0 && f < time.Second, "first check at %v", f)
		}
		// Spread: 200 uniform draws leave a tenth of the range empty at
		// either end with probability 0.9^200 < 1e-9.
		assert.Less(t, slicesMin(gaps), 840*time.Millisecond)
		assert.Greater(t, slicesMax(gaps), 1160*time.Millisecond)
		assert.Less(t, slicesMin(firsts), 100*time.Millisecond)
		assert.Greater(t, slicesMax(firsts), 900*time.Millisecond)
	})
}

func slicesMin(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func slicesMax(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// TestHealthChecker_othersDown: a peer down by the Down option is never
// checked nor brought up; once an operator brings it up it is checked and
// taken down after Fall failures. A peer the checker took down that an
// Update brings up (its snapshot peer is up) is checked as a fresh one:
// Fall more failures take it down again. Interval 1 s, no jitter, first
// checks at 0, every check fails, Fall 3.
func TestHealthChecker_othersDown(t *testing.T) {
	a, b := balancer.NewPeer("a"), balancer.NewPeer("b", balancer.Down())
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{a, b})
	require.NoError(t, err)
	v := newVirtualChecker(t, bal, script("F"), HealthInterval(time.Second), HealthJitter(0))
	v.runUntil(10 * time.Second)
	assert.Equal(t, []string{"t=2 a down"}, v.log)
	assert.Empty(t, v.checks["b"], "b is down by its configuration")
	assert.True(t, b.IsDown())

	// The operator brings b up at 10 s: checked from 10 s (its next due
	// time), down at 12 s. An Update keeps a but with its snapshot up:
	// a is the checker's again, checked at 10, 11, 12 s: down at 12 s.
	require.NoError(t, bal.SetDown(b, false))
	require.NoError(t, bal.Update([]*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b")}))
	require.False(t, a.IsDown())
	v.runUntil(13 * time.Second)
	assert.Equal(t, []string{"t=2 a down", "t=12 a down", "t=12 b down"}, sortedAfter(v.log, 1))

	// The checks pass from 13 s: a and b, both taken down by the
	// checker, come up at the second pass, 14 s.
	v.result = script("S")
	v.runUntil(16 * time.Second)
	assert.Equal(t, []string{"t=14 a up", "t=14 b up"}, sortedAfter(v.log, 3)[3:])
	assert.Zero(t, v.Stats().Down)
}

// sortedAfter returns log[from:] sorted within each instant (the peers
// checked at one instant come in heap order).
func sortedAfter(log []string, from int) []string {
	out := append([]string(nil), log[:from]...)
	rest := append([]string(nil), log[from:]...)
	for i := range rest {
		for j := i + 1; j < len(rest); j++ {
			if strings.Compare(rest[j], rest[i]) < 0 {
				rest[i], rest[j] = rest[j], rest[i]
			}
		}
	}
	return append(out, rest...)
}

// TestHealthChecker_followsPeers: the checker reads the peers once an
// interval, at 0, 1, 2 s...: a peer added at 2.5 s is first read at 3 s
// and checked then (first check at u × interval = 0 after it); a removed
// peer is checked no more, and the result of a check in flight when it
// left is dropped.
func TestHealthChecker_followsPeers(t *testing.T) {
	a, b := balancer.NewPeer("a"), balancer.NewPeer("b")
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{a, b})
	require.NoError(t, err)
	v := newVirtualChecker(t, bal, script("F"), HealthInterval(time.Second), HealthJitter(0), HealthFall(1))
	v.runUntil(2500 * time.Millisecond)
	c := balancer.NewPeer("c")
	require.NoError(t, bal.Add(c))
	require.NoError(t, bal.Remove(b))
	v.runUntil(5 * time.Second)
	assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, v.checks["b"])
	assert.Equal(t, []time.Duration{3 * time.Second, 4 * time.Second}, v.checks["c"])
	assert.Equal(t, []string{"t=0 a down", "t=0 b down", "t=3 c down"}, sortedAfter(v.log, 0))
	assert.Equal(t, 2, v.Stats().Down, "a and c; b left")

	// A check of c in flight when c leaves: its result is dropped.
	var inFlight *peerHealth
	v.launch = func(ph *peerHealth) { inFlight = ph }
	require.NoError(t, bal.SetDown(c, false))
	v.runUntil(6 * time.Second) // c's next check (t=5) starts
	require.NotNil(t, inFlight)
	require.NoError(t, bal.Remove(c))
	v.runUntil(7 * time.Second) // read at 6 s: c is gone
	v.apply(healthResult{inFlight, nil, v.now})
	assert.NotContains(t, v.peers, c)
	assert.Empty(t, v.queue.without(a))
}

// without returns the queued peers other than p.
func (q healthQueue) without(p *balancer.Peer) []string {
	var out []string
	for _, ph := range q {
		if ph.p != p {
			out = append(out, ph.p.Addr())
		}
	}
	return out
}

func TestNewHealthChecker_badInput(t *testing.T) {
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a")})
	require.NoError(t, err)
	tests := []struct {
		name string
		b    balancer.Balancer
		opt  HealthOption
		want string
	}{
		{"nil balancer", nil, HealthJitter(0), "nil Balancer"},
		{"nil option", bal, nil, "opts[0] is nil"},
		{"path", bal, HealthPath("healthz"), `HealthPath "healthz"`},
		{"interval", bal, HealthInterval(0), "HealthInterval 0s"},
		{"interval of 1 ns", bal, HealthInterval(time.Nanosecond), "HealthInterval 1ns out of range [10ms, 24h0m0s]"},
		{"interval past a day", bal, HealthInterval(24*time.Hour + 1), "HealthInterval 24h0m0.000000001s"},
		{"interval at MaxInt64", bal, HealthInterval(math.MaxInt64), "HealthInterval 2562047h47m16.854775807s"},
		{"timeout", bal, HealthTimeout(-time.Second), "HealthTimeout -1s"},
		{"timeout past a day", bal, HealthTimeout(25 * time.Hour), "HealthTimeout 25h0m0s"},
		{"path with a bad escape", bal, HealthPath("/health%zz"), `HealthPath "/health%zz" forms no request`},
		{"path with a newline", bal, HealthPath("/health\n"), `HealthPath "/health\n" forms no request`},
		{"rise", bal, HealthRise(0), "HealthRise 0"},
		{"fall", bal, HealthFall(1001), "HealthFall 1001"},
		{"jitter", bal, HealthJitter(0.6), "HealthJitter 0.6"},
		{"transport", bal, HealthTransport(nil), "HealthTransport(nil)"},
		{"rand", bal, HealthRand(nil), "HealthRand(nil)"},
		{"hook", bal, HealthOnChange(nil), "HealthOnChange(nil)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHealthChecker(tc.b, tc.opt)
			require.ErrorIs(t, err, balancer.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, h)
		})
	}
}

// TestHealthChecker_check makes single checks against a loopback server:
// a 2xx or 3xx passes (a redirect is not followed), any other status
// fails, and so do an answer slower than the timeout and a refused
// connection. The check asks for the path set, with GET.
func TestHealthChecker_check(t *testing.T) {
	var status atomic.Int32
	var stall atomic.Bool
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Method + " " + r.URL.RequestURI())
		if stall.Load() {
			<-r.Context().Done()
			return
		}
		if s := int(status.Load()); s >= 300 && s < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(srv.Listener.Addr().String())})
	require.NoError(t, err)
	h, err := newHealthChecker(bal, []HealthOption{HealthPath("/healthz?deep=1"), HealthTimeout(50 * time.Millisecond)})
	require.NoError(t, err)
	p := bal.Peers()[0]
	for _, tc := range []struct {
		status int
		stall  bool
		pass   bool
	}{{200, false, true}, {204, false, true}, {301, false, true}, {399, false, true}, {404, false, false}, {500, false, false}, {503, false, false}, {200, true, false}} {
		status.Store(int32(tc.status))
		stall.Store(tc.stall)
		err := h.check(p)
		assert.Equal(t, tc.pass, err == nil, "status %d, stalled %v: %v", tc.status, tc.stall, err)
		if !tc.pass && !tc.stall {
			var se *StatusError
			assert.ErrorAs(t, err, &se)
		}
	}
	assert.Equal(t, "GET /healthz?deep=1", seen.Load())
	srv.Close()
	assert.Error(t, h.check(p), "refused")
	assert.Zero(t, p.Stats().Attempts)
}

// TestHealthChecker_leavesAndReturns: a peer the checker took down that
// leaves the Balancer and is added back as the same *Peer, still down
// (nothing else can change a removed peer), is the checker's again: it
// comes up once it passes Rise checks. Interval 1 s, no jitter, Fall 1,
// Rise 1: a fails at 0 (down), leaves at 0.5 s (dropped at the read at
// 1 s), comes back at 1.5 s (read at 2 s, checked then: it passes).
func TestHealthChecker_leavesAndReturns(t *testing.T) {
	a, b := balancer.NewPeer("a"), balancer.NewPeer("b")
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{a, b})
	require.NoError(t, err)
	v := newVirtualChecker(t, bal, func(p *balancer.Peer, n int) error {
		if p == a && n == 1 {
			return errCheck
		}
		return nil
	}, HealthInterval(time.Second), HealthJitter(0), HealthFall(1), HealthRise(1))
	v.runUntil(500 * time.Millisecond)
	require.Equal(t, []string{"t=0 a down"}, v.log)
	require.NoError(t, bal.Remove(a))
	v.runUntil(1500 * time.Millisecond)
	assert.Zero(t, v.Stats().Down, "a left")
	require.NoError(t, bal.Add(a))
	require.True(t, a.IsDown())
	v.runUntil(3 * time.Second)
	assert.Equal(t, []string{"t=0 a down", "t=2 a up"}, v.log)
	assert.False(t, a.IsDown())
	assert.Equal(t, []time.Duration{0, 2 * time.Second}, v.checks["a"])
}

// TestHealthChecker_statsDown: Stats().Down counts the peers the checker
// took down that are down now, so an operator's SetDown(p, false) leaves
// it at once, not at p's next check an interval later.
func TestHealthChecker_statsDown(t *testing.T) {
	a := balancer.NewPeer("a")
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{a, balancer.NewPeer("b")})
	require.NoError(t, err)
	v := newVirtualChecker(t, bal, func(p *balancer.Peer, _ int) error {
		if p == a {
			return errCheck
		}
		return nil
	}, HealthInterval(time.Hour), HealthJitter(0), HealthFall(1))
	v.runUntil(time.Second)
	require.Equal(t, 1, v.Stats().Down)
	require.NoError(t, bal.SetDown(a, false))
	assert.Zero(t, v.Stats().Down, "at once")
}

// TestHealthChecker_discoveryDown: a Down set by an Update's snapshot on a
// peer the checker holds down is not told apart from the checker's own:
// the checker brings the peer up when it passes Rise checks (Rise 2,
// interval 1 s, checks at 0, 1, 2... s: fails at 0, passes from 1 s).
func TestHealthChecker_discoveryDown(t *testing.T) {
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a")})
	require.NoError(t, err)
	v := newVirtualChecker(t, bal, script("FS"), HealthInterval(time.Second), HealthJitter(0), HealthFall(1))
	v.runUntil(500 * time.Millisecond)
	require.NoError(t, bal.Update([]*balancer.Peer{balancer.NewPeer("a", balancer.Down())}))
	v.runUntil(3 * time.Second)
	assert.Equal(t, []string{"t=0 a down", "t=2 a up"}, v.log)
	assert.False(t, bal.Peers()[0].IsDown())
}

// TestHealthChecker_intervalBounds: the bounds are accepted, and at the
// longest interval with the widest jitter and u near 1 the first check
// comes just under a day after the start and the next 1.5 days later, no
// overflow (interval × 1.5 is far below MaxInt64 ns).
func TestHealthChecker_intervalBounds(t *testing.T) {
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a")})
	require.NoError(t, err)
	h, err := newHealthChecker(bal, []HealthOption{HealthInterval(MinHealthInterval)})
	require.NoError(t, err)
	assert.Equal(t, 10*time.Millisecond, h.cfg.timeout)
	v := newVirtualChecker(t, bal, script("S"), HealthInterval(MaxHealthInterval), HealthJitter(0.5), HealthRand(constSource(float64Max)))
	v.runUntil(4 * 24 * time.Hour)
	c := v.checks["a"]
	require.Len(t, c, 3)
	assert.InDelta(t, float64(24*time.Hour), float64(c[0]), float64(time.Millisecond))
	assert.Equal(t, 36*time.Hour, c[1]-c[0])
}
