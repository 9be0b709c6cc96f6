package balancer

import (
	"math"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backoffRig is one picker holding peer a (max_fails=1, fail_timeout=10s)
// and b, down, so that every pick can only be a and nginx's single-server
// rule does not apply (two peers), on a fake clock.
type backoffRig struct {
	t    *testing.T
	p    Balancer
	a    *Peer
	clk  *fakeClock
	base time.Time
}

func newBackoffRig(t *testing.T, pc pickerCase, opts ...Option) *backoffRig {
	clk := newFakeClock()
	a := NewPeer("a", MaxFails(1), FailTimeout(10*time.Second))
	b := NewPeer("b", Down())
	p, err := pc.new([]*Peer{a, b}, append([]Option{clk.opt()}, opts...)...)
	require.NoError(t, err)
	return &backoffRig{t, p, a, clk, clk.now()}
}

// at sets the clock to d past the start.
func (r *backoffRig) at(d time.Duration) { r.clk.set(r.base.Add(d)) }

// attempt picks a at d and reports the outcome.
func (r *backoffRig) attempt(d time.Duration, failed bool) {
	r.t.Helper()
	r.at(d)
	got, err := r.p.Pick(nil)
	require.NoError(r.t, err, "pick at %v", d)
	require.Same(r.t, r.a, got, "pick at %v", d)
	require.NoError(r.t, r.p.Done(got, Outcome{Failed: failed}))
}

// outThrough checks that a, taken out at from, is out through from+w
// inclusive (nginx's <=) and probed at from+w+1ns: no live peer at the
// window's last instant, a at the next. NextEligible says the same. It
// returns the probe's time, its attempt counted in flight.
func (r *backoffRig) outThrough(from, w time.Duration) time.Duration {
	r.t.Helper()
	r.at(from + w)
	next, ok := r.p.(interface{ NextEligible() (time.Time, bool) }).NextEligible()
	require.True(r.t, ok, "NextEligible at %v", from+w)
	assert.Equal(r.t, r.base.Add(from+w+1), next, "NextEligible after the ejection at %v", from)
	_, err := r.p.Pick(nil)
	require.ErrorIs(r.t, err, ErrNoLivePeer, "out at %v (window %v from %v)", from+w, w, from)
	return from + w + 1
}

// probe picks a at d, its window having passed, and reports the outcome.
func (r *backoffRig) probe(d time.Duration, failed bool) {
	r.t.Helper()
	r.attempt(d, failed)
}

// TestBackoff_windowsGrowAndCap: with WithEjectionBackoff(35s), each failed
// probe takes a out for fail_timeout × its ejection count, capped at 35s.
// Envoy's rule, derived: the count n starts at 0; an ejection adds one
// while n × 10s < 35s + 10s, so n goes 1, 2, 3, 4, 5 and stays at 5
// (5 × 10s = 50s ≥ 45s); the window is min(n × 10s, 35s). Every probe comes
// the instant its window has passed, so no healthy interval elapses
// (1ns < 10s: no decrement).
func TestBackoff_windowsGrowAndCap(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		r := newBackoffRig(t, pc, WithEjectionBackoff(35*time.Second))
		r.attempt(0, true) // n = 1
		at := r.outThrough(0, 10*time.Second)
		for _, w := range []time.Duration{
			20 * time.Second, // n = 2
			30 * time.Second, // n = 3
			35 * time.Second, // n = 4: 40s, capped
			35 * time.Second, // n = 5: 50s, capped
			35 * time.Second, // n = 5 (50s ≥ 45s: no increment)
		} {
			r.probe(at, true)
			at = r.outThrough(at, w)
		}
	})
}

// TestBackoff_offIsNginx: without the option every failed probe takes a out
// for fail_timeout again (RR.c 591-593, 629-651).
func TestBackoff_offIsNginx(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		r := newBackoffRig(t, pc)
		r.attempt(0, true)
		at := r.outThrough(0, 10*time.Second)
		for range 4 {
			r.probe(at, true)
			at = r.outThrough(at, 10*time.Second)
		}
	})
}

// TestBackoff_decay: each whole fail_timeout a spends eligible after its
// window's end takes one off its count before the next ejection adds one.
// a is taken out 5 times in a row (n = 5, the window 35s, as in
// TestBackoff_windowsGrowAndCap), a probe succeeds at the window's end, and
// a fails again after healthy, counted from the window's end (the instant
// a became eligible). The next window is min((max(0, 5 − ⌊healthy/10s⌋) +
// 1) × 10s, 35s), never below 10s.
func TestBackoff_decay(t *testing.T) {
	tests := []struct {
		healthy time.Duration
		want    time.Duration
	}{
		{0, 35 * time.Second},                                     // 5 − 0 = 5, not incremented (50s ≥ 45s): 50s, capped
		{20*time.Second - 1, 35 * time.Second},                    // 5 − 1 + 1 = 5: 50s, capped
		{30*time.Second - 1, 35 * time.Second},                    // 5 − 2 + 1 = 4: 40s, capped
		{30 * time.Second, 30 * time.Second},                      // 5 − 3 + 1 = 3
		{40 * time.Second, 20 * time.Second},                      // 5 − 4 + 1 = 2
		{49*time.Second + 999*time.Millisecond, 20 * time.Second}, // 5 − 4 + 1 = 2
		{50 * time.Second, 10 * time.Second},                      // 0 + 1 = 1
		{1000 * time.Hour, 10 * time.Second},                      // 0 + 1 = 1
	}
	for _, tt := range tests {
		t.Run(tt.healthy.String(), func(t *testing.T) {
			forEachPicker(t, func(t *testing.T, pc pickerCase) {
				r := newBackoffRig(t, pc, WithEjectionBackoff(35*time.Second))
				r.attempt(0, true)
				at := r.outThrough(0, 10*time.Second)
				for _, w := range []time.Duration{20 * time.Second, 30 * time.Second, 35 * time.Second, 35 * time.Second} {
					r.probe(at, true)
					at = r.outThrough(at, w)
				}
				end := at - 1 // the last window's end: a eligible from here
				r.probe(at, false)
				require.Equal(t, 0, r.a.State().Fails, "readmitted")
				fail := end + max(tt.healthy, 1) // the probe took the window's first instant
				r.attempt(fail, true)
				r.outThrough(fail, tt.want)
			})
		})
	}
}

// TestBackoff_hugeNoOverflow: a fail_timeout of a century and the longest
// cap. The second window, 2 centuries from about 1 century past the epoch,
// ends past the last instant int64 nanoseconds hold: a stays out through
// it, and NextEligible saturates there instead of wrapping into the past.
// A count far past any real one saturates the window too.
func TestBackoff_hugeNoOverflow(t *testing.T) {
	const century = 100 * 365 * 24 * time.Hour // 3.15e18 ns; 3 centuries > 2^63 ns
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a := NewPeer("a", MaxFails(1), FailTimeout(century))
		b := NewPeer("b", Down())
		p, err := pc.new([]*Peer{a, b}, clk.opt(), WithEjectionBackoff(math.MaxInt64))
		require.NoError(t, err)
		for range 2 {
			got, err := p.Pick(nil)
			require.NoError(t, err)
			require.NoError(t, p.Done(got, Outcome{Failed: true}))
			clk.add(century + 1) // past the first window: the probe
		}
		clk.set(time.Unix(0, math.MaxInt64))
		_, err = p.Pick(nil)
		require.ErrorIs(t, err, ErrNoLivePeer, "out through the last instant")
		next, ok := p.(interface{ NextEligible() (time.Time, bool) }).NextEligible()
		require.True(t, ok)
		assert.Equal(t, time.Unix(0, math.MaxInt64), next)
		a.ejections.Store(math.MaxInt64)
		assert.Equal(t, int64(math.MaxInt64), a.window(), "count × fail_timeout saturates")
	})
}

// TestBackoff_badValues: every picker refuses a non-positive cap, naming
// the option and the value.
func TestBackoff_badValues(t *testing.T) {
	for _, d := range []time.Duration{0, -1, math.MinInt64} {
		forEachPicker(t, func(t *testing.T, pc pickerCase) {
			_, err := pc.new([]*Peer{NewPeer("a")}, WithEjectionBackoff(d))
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, "WithEjectionBackoff("+d.String()+")")
			assert.ErrorContains(t, err, pc.name)
		})
	}
}

// TestBackoff_belowMaxFailsIsNginx: the backed-off window is the length of
// an ejection only; below max_fails the window in which failures count is
// fail_timeout, as nginx's. a (max_fails=2) is taken out three times in a
// row (count 3), readmitted, then fails once at T: the first pick past
// T+10s checks it (RR.c 591-593) and its success clears the failure
// (657-659), so one more failure leaves a in.
func TestBackoff_belowMaxFailsIsNginx(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a := NewPeer("a", MaxFails(2), FailTimeout(10*time.Second))
		b := NewPeer("b", Down())
		p, err := pc.new([]*Peer{a, b}, clk.opt(), WithEjectionBackoff(time.Hour))
		require.NoError(t, err)
		r := &backoffRig{t, p, a, clk, clk.now()}
		r.attempt(0, true)
		r.attempt(0, true) // out: count 1
		at := r.outThrough(0, 10*time.Second)
		r.probe(at, true) // count 2
		at = r.outThrough(at, 20*time.Second)
		r.probe(at, true) // count 3
		at = r.outThrough(at, 30*time.Second)
		r.probe(at, false) // readmitted
		T := at + time.Minute
		r.attempt(T, true)
		r.attempt(T+10*time.Second+1, false) // checked, and cleared
		r.attempt(T+10*time.Second+1, true)  // one failure on record
		r.attempt(T+10*time.Second+1, false) // still in
	})
}

// TestBackoff_inPanic: a pick in panic counts as a probe for
// readmission, but its failure is an ejection only once the window of the
// peer's last ejection has ended (Envoy ejects a host once per ejection,
// not per failed request). a and b (max_fails 1, fail_timeout 10s) both
// fail at one instant T: out, count 1 each, and under
// WithPanicThreshold(50) the picker is in panic (0 of 2 eligible). Four
// more failed picks of each in panic at T leave the counts at 1, windows
// 10s. Then picks at T+5s, inside the window, until each peer has one,
// reported failed at T+10s+1ns, past its end: a second ejection each (no whole fail_timeout
// since the window ended, so no decay), count 2, windows 2 × 10s = 20s.
func TestBackoff_inPanic(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := []*Peer{NewPeer("a", FailTimeout(10*time.Second)), NewPeer("b", FailTimeout(10*time.Second))}
		p, err := pc.new(peers, clk.opt(), WithPanicThreshold(50), WithEjectionBackoff(35*time.Second))
		require.NoError(t, err)
		n := 0
		pick := func() *Peer {
			var r Request
			r.SetKey(strconv.Itoa(n))
			r.SetClientAddr(netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}))
			n++
			q, err := p.Pick(&r)
			require.NoError(t, err, "in panic every pick finds a peer")
			return q
		}
		fails := map[*Peer]int{}
		for (fails[peers[0]] < 5 || fails[peers[1]] < 5) && n < 1000 {
			q := pick()
			fails[q]++
			require.NoError(t, p.Done(q, Outcome{Failed: true}))
		}
		for _, q := range peers {
			assert.Equal(t, int64(1), q.ejections.Load(), q.Addr())
			assert.Equal(t, int64(10*time.Second), q.window(), q.Addr())
		}
		clk.add(5 * time.Second)
		var held []*Peer // until both are picked; a peer picked twice is ejected by its first report only
		for seen := map[*Peer]bool{}; len(seen) < 2 && n < 2000; {
			q := pick()
			seen[q] = true
			held = append(held, q)
		}
		clk.add(5*time.Second + 1)
		for _, q := range held {
			require.NoError(t, p.Done(q, Outcome{Failed: true}))
		}
		for _, q := range peers {
			assert.Equal(t, int64(2), q.ejections.Load(), q.Addr())
			assert.Equal(t, int64(20*time.Second), q.window(), q.Addr())
		}
	})
}
