package balancer

import (
	"math"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer/internal/defaults"
)

// guardKeys are the hash pickers' keys guardRequest routes by, built once
// so that a request allocates nothing.
var guardKeys = func() []string {
	k := make([]string, 4096)
	for i := range k {
		k[i] = "key" + strconv.Itoa(i)
	}
	return k
}()

// guardRequest resets r into a fresh request routed by i mod 4096: the
// hash pickers' key and IPHash's client address (a /24 of its own for each,
// since IPHash hashes three octets) both follow it; the other pickers
// ignore them.
func guardRequest(r *Request, i int) *Request {
	i %= len(guardKeys)
	r.Reset()
	r.SetKey(guardKeys[i])
	r.SetClientAddr(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}))
	return r
}

// failOut takes each of targets out of b with one failed attempt (max_fails
// 1): it picks with fresh requests until it holds an attempt on each target,
// reporting the other attempts as successes, then reports each held one
// failed.
func failOut(t *testing.T, b Balancer, targets []*Peer) {
	t.Helper()
	held := map[*Peer]bool{}
	var r Request
	for i := 0; len(held) < len(targets) && i < 100_000; i++ {
		p, err := b.Pick(guardRequest(&r, i))
		require.NoError(t, err)
		if slices.Contains(targets, p) && !held[p] {
			held[p] = true
			continue
		}
		require.NoError(t, b.Done(p, Outcome{}))
	}
	require.Len(t, held, len(targets), "picks reached every peer to fail")
	for p := range held {
		require.NoError(t, b.Done(p, Outcome{Failed: true}))
	}
}

// reached picks n times with fresh requests, holding every attempt (so no
// report changes any peer's failures), and returns the peers picked.
func reached(t *testing.T, b Balancer, n int) map[*Peer]bool {
	t.Helper()
	got := map[*Peer]bool{}
	var r Request
	for i := range n {
		p, err := b.Pick(guardRequest(&r, 1_000_000+i))
		require.NoError(t, err)
		got[p] = true
	}
	return got
}

// TestPanicThreshold_everyPicker: every picker of the registry, 10 peers
// (max_fails 1), k of them failed out, threshold 50%. Derivation: the peers
// not down are the 10, the eligible 10−k; panic engages when
// (10−k)·100 < 50·10, that is k > 5. So while k ≤ 5 the picks reach exactly
// the 10−k others, and from k = 6 on (10 included, where nginx would have
// none) all 10. Without the option, the others alone for every k < 10.
func TestPanicThreshold_everyPicker(t *testing.T) {
	const n, threshold = 10, 50.0
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for k := 0; k <= n; k++ {
			for _, guarded := range []bool{false, true} {
				clk := newFakeClock()
				peers := makePeers(n, numbered, nil)
				opts := []Option{clk.opt()}
				if guarded {
					opts = append(opts, WithPanicThreshold(threshold))
				}
				b, err := pc.new(peers, opts...)
				require.NoError(t, err)
				failOut(t, b, peers[:k])
				want := map[*Peer]bool{}
				panics := guarded && float64(n-k)*100 < threshold*n
				for i, p := range peers {
					if i >= k || panics {
						want[p] = true
					}
				}
				if len(want) == 0 {
					_, err := b.Pick(nil)
					assert.ErrorIs(t, err, ErrNoLivePeer, "k=%d guarded=%v", k, guarded)
					continue
				}
				got := reached(t, b, 2000)
				assert.Equal(t, guardAddrs(want), guardAddrs(got), "k=%d guarded=%v", k, guarded)
				assert.Equal(t, panics, b.(interface{ InPanic() bool }).InPanic(), "k=%d guarded=%v", k, guarded)
			}
		}
	})
}

// guardAddrs returns the sorted addresses of a set of peers.
func guardAddrs(set map[*Peer]bool) []string {
	var out []string
	for p := range set {
		out = append(out, p.Addr())
	}
	slices.Sort(out)
	return out
}

// TestGuards_badValues: every picker refuses a percent out of [0, 100],
// NaN and the infinities included, with ErrInvalidConfig and a message
// naming the option and the value; 0 and 100 are accepted.
func TestGuards_badValues(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, mk := range []struct {
			name string
			opt  func(float64) Option
		}{{"WithPanicThreshold", WithPanicThreshold}, {"WithMaxEjectionPercent", WithMaxEjectionPercent}} {
			for _, v := range []float64{math.NaN(), -1, -0.001, 100.5, math.Inf(1), math.Inf(-1)} {
				_, err := pc.new([]*Peer{NewPeer("a")}, mk.opt(v))
				require.ErrorIs(t, err, ErrInvalidConfig, "%s(%v)", mk.name, v)
				assert.ErrorContains(t, err, mk.name+"("+strconv.FormatFloat(v, 'g', -1, 64)+")")
				assert.ErrorContains(t, err, pc.name)
			}
			for _, v := range []float64{0, 100} {
				_, err := pc.new([]*Peer{NewPeer("a")}, mk.opt(v))
				assert.NoError(t, err, "%s(%v)", mk.name, v)
			}
		}
	})
}

// outCount counts, independently of the guard, the peers of ps inside
// their fail window at now, from their State: max_fails failures on record
// and the last check at most fail_timeout ago.
func outCount(ps []*Peer, now time.Time) int {
	n := 0
	for _, p := range ps {
		st := p.State()
		if !st.Down && p.MaxFails() != 0 && st.Fails >= p.MaxFails() && !now.After(st.Checked.Add(p.FailTimeout())) {
			n++
		}
	}
	return n
}

// TestMaxEjectionPercent_everyPicker: every picker, 10 peers (max_fails 1),
// each failed once. Derivation (Envoy's ejectHost): a failure may take a
// peer out while 100·(out+1) ≤ percent·10, or with none out; so the peers
// out end at max(1, ⌊percent/10⌋): 3 for 30%, 1 for 5% (the one Envoy
// always allows), 10 for 100%; the other failures are capped, and the
// picks reach exactly the peers not out.
func TestMaxEjectionPercent_everyPicker(t *testing.T) {
	const n = 10
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, pct := range []float64{5, 30, 55, 100} {
			clk := newFakeClock()
			peers := makePeers(n, numbered, nil)
			var capped []*Peer
			b, err := pc.new(peers, clk.opt(), WithMaxEjectionPercent(pct), WithEvents(func(e Event) {
				if e.Kind == EventEjectionCapped {
					capped = append(capped, e.Peer)
				}
			}))
			require.NoError(t, err)
			failOut(t, b, peers)
			wantOut := max(1, int(pct)*n/100)
			assert.Equal(t, wantOut, outCount(peers, clk.now()), "%v%%: peers out", pct)
			assert.Len(t, capped, n-wantOut, "%v%%: EventEjectionCapped", pct)
			assert.Equal(t, uint64(n-wantOut), b.(interface{ EjectionCappedCount() uint64 }).EjectionCappedCount())
			in := map[*Peer]bool{}
			for _, p := range peers {
				if p.Stats().Health != HealthFailed {
					in[p] = true
					assert.Equal(t, uint64(1), p.Stats().Failures, "%s: a capped failure is counted", p)
				}
			}
			assert.Len(t, in, n-wantOut)
			if len(in) > 0 {
				assert.Equal(t, guardAddrs(in), guardAddrs(reached(t, b, 2000)), "%v%%: picks reach the peers kept in", pct)
			}
		}
	})
}

// TestMaxEjectionPercent_maxFails: with max_fails 3 a capped peer keeps
// two failures on record, one short of out, so its next failure asks the
// cap again; once a peer out is readmitted, that failure takes it out.
func TestMaxEjectionPercent_maxFails(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(2, letter, func(i int) []PeerOption {
		return []PeerOption{MaxFails(3), FailTimeout(time.Duration(1+9*i) * time.Second)} // a 1 s, b 10 s
	})
	b, err := NewLeastConn(peers, clk.opt(), WithMaxEjectionPercent(50)) // one of two
	require.NoError(t, err)
	fail := func(p *Peer) {
		t.Helper()
		for range 3 {
			require.NoError(t, b.Done(holdOn(t, b, p), Outcome{Failed: true}))
		}
	}
	fail(peers[0])
	assert.Equal(t, HealthFailed, peers[0].Stats().Health)
	fail(peers[1])
	assert.Equal(t, HealthOK, peers[1].Stats().Health, "the cap keeps b in")
	assert.Equal(t, 2, peers[1].Stats().Fails, "one short of max_fails")
	assert.Equal(t, uint64(1), b.EjectionCappedCount(), "b's third failure asked the cap")
	// a's window passes (b's, 10 s, does not); a's probe succeeds; b's
	// next failure takes it out.
	clk.add(time.Second + 1)
	require.NoError(t, b.Done(holdOn(t, b, peers[0]), Outcome{}))
	assert.Equal(t, HealthOK, peers[0].Stats().Health)
	require.NoError(t, b.Done(holdOn(t, b, peers[1]), Outcome{Failed: true}))
	assert.Equal(t, HealthFailed, peers[1].Stats().Health)
}

// holdOn picks from b until it gets p, reporting the other attempts as
// successes, and returns p with its attempt in flight.
func holdOn(t *testing.T, b Balancer, p *Peer) *Peer {
	t.Helper()
	var r Request
	for i := range 10_000 {
		got, err := b.Pick(guardRequest(&r, i))
		require.NoError(t, err)
		if got == p {
			return p
		}
		require.NoError(t, b.Done(got, Outcome{}))
	}
	t.Fatalf("no pick of %s", p)
	return nil
}

// holdEach picks from b with fresh requests, holding every attempt, until
// it holds one on each of targets; it returns the attempts held, those on
// targets first, in the order of targets. Holding changes no peer's failures.
func holdEach(t *testing.T, b Balancer, targets ...*Peer) []*Peer {
	t.Helper()
	var first, extra []*Peer
	seen := map[*Peer]bool{}
	var r Request
	for i := 0; len(seen) < len(targets); i++ {
		require.Less(t, i, 100_000, "no pick of every target")
		p, err := b.Pick(guardRequest(&r, i))
		require.NoError(t, err)
		if slices.Contains(targets, p) && !seen[p] {
			seen[p] = true
			continue
		}
		extra = append(extra, p)
	}
	first = append(first, targets...)
	return append(first, extra...)
}

// TestPanicThreshold_readmits: 3 peers all out, threshold 50. A pick in
// panic of a peer inside its window is a probe: its success readmits it
// (EventPeerReadmitted); with one of three eligible (33% < 50%) the picker
// stays in panic, with two (67%) panic ends (EventPanicOver, once, after
// the readmission that ends it) and the picks reach the two alone, as
// nginx's would, until the third's window passes. A failure in panic
// takes the peer out again (EventPeerOut) and restarts its window.
func TestPanicThreshold_readmits(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := makePeers(3, letter, nil)
		var kinds []EventKind
		b, err := pc.new(peers, clk.opt(), WithPanicThreshold(50), WithEvents(func(e Event) {
			if e.Kind != EventPeerProbe && e.Kind != EventReweighted {
				kinds = append(kinds, e.Kind)
			}
		}))
		require.NoError(t, err)
		inPanic := b.(interface{ InPanic() bool }).InPanic
		failOut(t, b, peers)
		clk.add(time.Second)
		held := holdEach(t, b, peers[2], peers[0], peers[1])
		require.NoError(t, b.Done(held[0], Outcome{Failed: true}))
		assert.Equal(t, clk.now(), peers[2].State().Checked, "a failure in panic restarts the window")
		require.NoError(t, b.Done(held[1], Outcome{}))
		assert.Zero(t, peers[0].Stats().Fails, "a success in panic readmits")
		assert.True(t, inPanic(), "1 of 3 eligible")
		require.NoError(t, b.Done(held[2], Outcome{}))
		assert.False(t, inPanic(), "2 of 3 eligible")
		assert.Equal(t, []EventKind{EventPeerOut, EventPeerOut, EventPeerOut, EventPanic,
			EventPeerOut, EventPeerReadmitted, EventPeerReadmitted, EventPanicOver}, kinds)
		for _, p := range held[3:] {
			require.NoError(t, b.Done(p, Outcome{}))
		}
		assert.Equal(t, guardAddrs(map[*Peer]bool{peers[0]: true, peers[1]: true}), guardAddrs(reached(t, b, 200)))
	})
}

// TestPanicThreshold_windowsEndOnTheClock: 10 peers, 6 out at t0
// (fail_timeout 10 s), threshold 50: in panic. No report comes; the clock
// passes t0+10 s. The first pick after that sees no peer inside its window
// (the count's validity ended with the earliest window), so panic is over
// (EventPanicOver) though nothing was reported; through t0+10 s exactly it
// still holds (nginx compares with <=).
func TestPanicThreshold_windowsEndOnTheClock(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := makePeers(10, numbered, nil)
		var panics, overs int
		b, err := pc.new(peers, clk.opt(), WithPanicThreshold(50), WithEvents(func(e Event) {
			switch e.Kind {
			case EventPanic:
				panics++
			case EventPanicOver:
				overs++
			}
		}))
		require.NoError(t, err)
		start := clk.now()
		failOut(t, b, peers[:6])
		inPanic := b.(interface{ InPanic() bool }).InPanic
		reached(t, b, 100)
		require.True(t, inPanic())
		require.Equal(t, 1, panics, "once per engagement, not per pick")
		clk.set(start.Add(defaults.FailTimeout))
		held := reached(t, b, 1000)
		assert.True(t, inPanic(), "still inside the windows at their end")
		assert.True(t, slices.ContainsFunc(peers[:6], func(p *Peer) bool { return held[p] }), "picks in panic reach peers out")
		clk.set(start.Add(defaults.FailTimeout + 1))
		_, err = b.Pick(guardRequest(new(Request), 7))
		require.NoError(t, err)
		assert.False(t, inPanic(), "the windows ended on the clock")
		assert.Equal(t, 1, overs)
	})
}

// TestPanicThreshold_backups: 4 primaries, 2 backups, threshold 50, for
// every picker that takes backups. Panic engages only when neither list
// could serve (below 50% eligible of its peers not down):
//   - primaries 0/4, backups 2/2: the backups serve, no panic, picks reach
//     the backups as nginx's do;
//   - primaries 0/4, backups 1/2 (50%, not below): no panic, the healthy
//     backup alone;
//   - primaries 1/4, backups 2/2: no panic, nginx's pick of the one
//     primary left;
//   - primaries 0/4, backups 0/2: panic, and the primaries, all eligible
//     in panic, take the picks.
func TestPanicThreshold_backups(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		if pc.alg.NoBackups {
			t.Skip("refuses backup peers")
		}
		for _, tt := range []struct {
			name           string
			primaryOut     int
			backupOut      int
			panics         bool
			reachP, reachB []int // indices reached
		}{
			{"primaries out", 4, 0, false, nil, []int{0, 1}},
			{"half the backups out", 4, 1, false, nil, []int{1}},
			{"one primary left", 3, 0, false, []int{3}, nil},
			{"all out", 4, 2, true, []int{0, 1, 2, 3}, nil},
		} {
			clk := newFakeClock()
			primaries := makePeers(4, numbered, nil)
			backups := makePeers(2, func(i int) string { return "b" + strconv.Itoa(i) }, func(int) []PeerOption { return []PeerOption{Backup()} })
			b, err := pc.new(slices.Concat(primaries, backups), clk.opt(), WithPanicThreshold(50))
			require.NoError(t, err)
			failOut(t, b, primaries[:tt.primaryOut])
			failOut(t, b, backups[:tt.backupOut])
			want := map[*Peer]bool{}
			for _, i := range tt.reachP {
				want[primaries[i]] = true
			}
			for _, i := range tt.reachB {
				want[backups[i]] = true
			}
			assert.Equal(t, guardAddrs(want), guardAddrs(reached(t, b, 1000)), tt.name)
			assert.Equal(t, tt.panics, b.(interface{ InPanic() bool }).InPanic(), tt.name)
		}
	})
}

// TestGuards_healthyPickAllocs: with both guards set, a healthy pick and
// its report allocate nothing, at every size; nor does a pick in panic
// (10 peers, 6 out, each failure of an out peer reported again, which only
// moves its window), once the count is made.
func TestGuards_healthyPickAllocs(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, n := range []int{10, 1000} {
			b, err := pc.new(benchPeers(n), WithPanicThreshold(50), WithMaxEjectionPercent(50))
			require.NoError(t, err)
			var r Request
			allocs := testing.AllocsPerRun(1000, func() {
				p, _ := b.Pick(guardRequest(&r, 1))
				_ = b.Done(p, Outcome{Latency: time.Millisecond})
			})
			assert.Zero(t, allocs, "healthy Pick+Done, %d peers", n)
		}
		clk := newFakeClock()
		peers := makePeers(10, numbered, nil)
		b, err := pc.new(peers, clk.opt(), WithPanicThreshold(50), WithMaxEjectionPercent(100))
		require.NoError(t, err)
		failOut(t, b, peers[:6])
		var r Request
		i := 0
		pickDone := func() {
			i++
			p, _ := b.Pick(guardRequest(&r, i%64))
			_ = b.Done(p, Outcome{Failed: slices.Index(peers, p) < 6, Latency: time.Millisecond})
		}
		pickDone()
		require.True(t, b.(interface{ InPanic() bool }).InPanic())
		assert.Zero(t, testing.AllocsPerRun(1000, pickDone), "Pick+Done in panic")
	})
}

// TestGuards_noLockOnHealthyPick: a healthy fresh pick that takes no lock
// without the guards takes none with them: it completes while the test
// holds the picker's lock. Pickers whose healthy pick locks without the
// guards (it does not complete within a second) are skipped.
func TestGuards_noLockOnHealthyPick(t *testing.T) {
	completes := func(b Balancer, s *peerSet) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			var r Request
			for i := range 100 {
				p, err := b.Pick(guardRequest(&r, i))
				if err == nil {
					_ = b.Done(p, Outcome{Latency: time.Millisecond})
				}
			}
		}()
		select {
		case <-done:
			return true
		case <-time.After(time.Second):
			return false // the goroutine ends once the lock is let go
		}
	}
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		build := func(opts ...Option) (Balancer, *peerSet) {
			peers := benchPeers(100)
			b, err := pc.new(peers, opts...)
			require.NoError(t, err)
			return b, peers[0].owner.Load()
		}
		if !completes(build()) {
			t.Skip("the healthy pick takes the lock without the guards")
		}
		assert.True(t, completes(build(WithPanicThreshold(50), WithMaxEjectionPercent(10))))
	})
}
