package balancerhttp_test

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// The capacity end-to-end test: three loopback servers of different
// capacities behind loadreport's Middleware, four clients each with its own
// Transport and picker, and one server slowing down mid-run.
//
// Capacity is workers / mean service time. Before the change:
//
//	big:    4 workers × 20 ms → 200 requests/s  (4/7 = 57.1%)
//	medium: 2 workers × 20 ms → 100 requests/s  (2/7 = 28.6%)
//	small:  2 workers × 40 ms →  50 requests/s  (1/7 = 14.3%)
//
// then big's mean service time becomes 80 ms: 50 requests/s, and the
// shares 25%, 50%, 25%. The clients keep capClients × capConc requests
// in flight (closed loop), more than the 8 workers, so requests queue.
//
// Why a report-driven weighted round robin must give those shares: gRFC
// A58 weighs a server by qps / utilization. The server reports as
// utilization its busy workers over its workers, averaged over the window
// of its qps (busyMeter), so the weight is workers / the mean service
// time of the window's requests: the server's capacity as those requests
// realized it, whatever the load.
//
// The tolerance. Service times are lognormal of shape 1 (coefficient of
// variation 1.31, p99 6× the mean), drawn in shuffled blocks of 16, one
// from each sixteenth of the distribution (capDrawer), so that the mean
// of n consecutive draws varies by about 12% at n = 30, 8.5% at 50 and
// 5.5% at 100, where independent draws vary by 22%, 16% and 12%
// (TestCapDrawer). The weights come from the last second's requests:
// before the change big's 170 or so, small's 45; after, big's and small's
// 40, medium's 80. That noise moves a share by 2 points or less (one
// standard deviation; after the change big's by 25% × 10% × (1 − 25%) =
// 1.9, medium's by 50% × 6.5% × 50% = 1.6; before, big's and small's by
// about 1.1). capShareTol, 8 points, is four of those, which leaves room
// for a busy machine's late timers (a 1 ms overshoot costs the 20 ms
// servers 5% of their capacity, medium's share 1 point after the change).
// It is less than the distance from the equal split RoundRobin gives (24
// points for big before, 17 for medium after): the control must miss.
// The servers' seeds are fixed, so every run draws the same sequences and
// a share's offset from capacity recurs from run to run: with these
// seeds, small's share after the change ran from 2 points low to 6
// high over 50 runs, mostly high.
const (
	capClients  = 4
	capConc     = 3 // requests in flight per client
	capSigma    = 1.0
	capWindow   = time.Second // the middleware's rps window
	capShareTol = 0.08
	capStrata   = 16 // draws per block, one from each stratum
)

// capPhases is the run's schedule: warm, measured before the change,
// change, settle (the report windows refill), measured after.
type capPhases struct {
	warm, before, settle, after time.Duration
}

func (p capPhases) change() time.Duration { return p.warm + p.before }
func (p capPhases) afterFrom() time.Duration {
	return p.change() + p.settle
}
func (p capPhases) end() time.Duration { return p.afterFrom() + p.after }

// The settle time is the rps window plus 20%: by then every report
// counts only requests served after the change (but for the few that
// began before it and ended after).
var capSchedule = capPhases{warm: 500 * time.Millisecond, before: time.Second, settle: 1200 * time.Millisecond, after: time.Second}

// busyMeter is a server's utilization: busy workers / workers, averaged
// over the window the middleware counts rps over (capWindow, in ten
// buckets, spanning as loadreport's rate window does), each request's
// service time counted in the bucket of its completion. Over the same
// requests and span as rps, qps / utilization is then exactly workers /
// the mean service time of the window's requests, the server's realized
// capacity, even while the load shifts. (The count of busy workers at the
// moment of a reply would always include the replying request, at least
// 1/workers: a bias against the servers with few workers; an average over
// another span than rps's skews the weights while the load shifts, as it
// does when the first reports come.)
type busyMeter struct {
	workers float64
	width   time.Duration // of a bucket
	start   time.Time

	mu   sync.Mutex
	idx  [10]time.Duration // guarded by mu: each bucket's index (elapsed / width)
	busy [10]time.Duration // guarded by mu: service time completed in it
}

func newBusyMeter(workers int, window time.Duration) *busyMeter {
	m := &busyMeter{workers: float64(workers), width: window / 10, start: time.Now()}
	for i := range m.idx {
		m.idx[i] = -1
	}
	return m
}

// done counts a service of d completed now.
func (m *busyMeter) done(d time.Duration) {
	cur := time.Since(m.start) / m.width
	m.mu.Lock()
	b := cur % 10
	if m.idx[b] != cur {
		m.idx[b], m.busy[b] = cur, 0
	}
	m.busy[b] += d
	m.mu.Unlock()
}

func (m *busyMeter) value() float64 {
	e := time.Since(m.start)
	cur := e / m.width
	var sum time.Duration
	m.mu.Lock()
	for j := max(cur-9, 0); j <= cur; j++ {
		if m.idx[j%10] == j {
			sum += m.busy[j%10]
		}
	}
	m.mu.Unlock()
	span := min(9*m.width+e-cur*m.width, e)
	span = max(span, m.width)
	return sum.Seconds() / (m.workers * span.Seconds())
}

// capServer is a loopback HTTP server with a fixed number of workers:
// a request waits for a free worker, holds it for a service time from its
// capDrawer scaled to `mean`, and answers with the server's name. Its
// Middleware reports the busyMeter's utilization.
type capServer struct {
	name string
	addr string
	sem  chan struct{}
	mean atomic.Int64 // nanoseconds
	busy *busyMeter

	mu       sync.Mutex
	draws    capDrawer    // guarded by mu
	services []capService // guarded by mu
}

// capService is one service: when it began and how long it held its
// worker, as the server's clock saw it (the sleep's own overshoot on a
// busy machine included).
type capService struct {
	began time.Time
	took  time.Duration
}

// capacity returns the server's realized capacity over the services
// begun in [from, to): workers / their mean duration; 0 for none.
func (s *capServer) capacity(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int
	var sum time.Duration
	for _, v := range s.services {
		if !v.began.Before(from) && v.began.Before(to) {
			n++
			sum += v.took
		}
	}
	if n == 0 {
		return 0
	}
	return float64(cap(s.sem)) * float64(n) / sum.Seconds()
}

func newCapServer(t *testing.T, name string, workers int, mean time.Duration, seed uint64) *capServer {
	t.Helper()
	s := &capServer{
		name:  name,
		sem:   make(chan struct{}, workers),
		busy:  newBusyMeter(workers, capWindow),
		draws: newCapDrawer(seed),
	}
	s.mean.Store(int64(mean))
	mw, err := loadreport.New(loadreport.WithWindow(capWindow), loadreport.WithUtilization(s.busy.value))
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Handler(s))
	t.Cleanup(srv.Close)
	s.addr = srv.Listener.Addr().String()
	return s
}

// capDrawer draws service times of mean 1 from a lognormal of shape
// capSigma, exp(σz − σ²/2), capped at 10 (which cuts 0.25% of draws and
// makes the mean 0.9896, TestCapDrawer), z the standard normal quantile
// of u. The u come in blocks of capStrata, one uniform in each
// [k/capStrata, (k+1)/capStrata), in a shuffled order: every block holds
// the distribution's whole range, so a second's requests realize nearly
// the mean capacity, while the order of long and short services stays
// random within each block. Not safe for concurrent use.
type capDrawer struct {
	rng   *rand.Rand
	block [capStrata]float64
	next  int // block[next] is the next draw's u
}

func newCapDrawer(seed uint64) capDrawer {
	return capDrawer{rng: rand.New(rand.NewPCG(seed, 17)), next: capStrata}
}

func (d *capDrawer) draw() float64 {
	if d.next == capStrata {
		for k := range d.block {
			d.block[k] = (float64(k) + d.rng.Float64()) / capStrata
		}
		d.rng.Shuffle(capStrata, func(i, j int) { d.block[i], d.block[j] = d.block[j], d.block[i] })
		d.next = 0
	}
	u := d.block[d.next]
	d.next++
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	return min(math.Exp(capSigma*z-capSigma*capSigma/2), 10)
}

// draw returns the next service time.
func (s *capServer) draw() time.Duration {
	s.mu.Lock()
	x := s.draws.draw()
	s.mu.Unlock()
	return time.Duration(x * float64(s.mean.Load()))
}

func (s *capServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.sem <- struct{}{}:
	case <-r.Context().Done():
		http.Error(w, "gave up waiting for a worker", http.StatusServiceUnavailable)
		return
	}
	began := time.Now()
	tm := time.NewTimer(s.draw())
	select {
	case <-tm.C:
	case <-r.Context().Done():
		tm.Stop()
	}
	took := time.Since(began)
	s.busy.done(took)
	s.mu.Lock()
	s.services = append(s.services, capService{began, took})
	s.mu.Unlock()
	<-s.sem
	_, _ = io.WriteString(w, s.name)
}

// capSample is one request as its client saw it.
type capSample struct {
	began  time.Duration // since the run began: the pick's time, near enough
	lat    time.Duration
	server string // the body: the server's name; "" on error
	err    error
}

// capResult is what one picker's run measured.
type capResult struct {
	before, after []float64 // each server's share of the requests begun in the window
	// Each server's share of the realized capacity (capServer.capacity)
	// over the services begun in the window.
	capBefore, capAfter []float64
	// Each client's shares in each window, for a failure's message.
	clientsBefore, clientsAfter string
	nBefore                     int
	nAfter                      int
	p99Before                   time.Duration
	p99After                    time.Duration
	p99                         time.Duration // over both windows
	errs                        []error
}

// capPercentile returns the q-quantile of ds (nearest rank), 0 for none.
func capPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// capRun is one picker's fleet: servers of its own and capClients
// clients, each with its own Transport and its own picker over Peers of
// its own.
type capRun struct {
	servers []*capServer
	clients []*http.Client
	samples [][]capSample // one list per client goroutine
}

func newCapRun(t *testing.T, newPicker func([]*balancer.Peer) (balancer.Balancer, error)) *capRun {
	t.Helper()
	r := &capRun{servers: []*capServer{
		newCapServer(t, "big", 4, 20*time.Millisecond, 1),
		newCapServer(t, "medium", 2, 20*time.Millisecond, 2),
		newCapServer(t, "small", 2, 40*time.Millisecond, 3),
	}}
	for range capClients {
		peers := make([]*balancer.Peer, len(r.servers))
		for j, s := range r.servers {
			peers[j] = balancer.NewPeer(s.addr)
		}
		p, err := newPicker(peers)
		require.NoError(t, err)
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = 4 * capConc
		t.Cleanup(base.CloseIdleConnections)
		r.clients = append(r.clients, &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: p, Base: base}})
	}
	r.samples = make([][]capSample, capClients*capConc)
	return r
}

// drive sends requests from capConc goroutines per client until end,
// each loop bounded to 1000 requests (several times what the servers can
// serve in the run), and returns when all have ended (each within the
// clients' 5 s timeout).
func (r *capRun) drive(start, end time.Time) {
	const maxPer = 1000
	var wg sync.WaitGroup
	for g := range r.samples {
		c := r.clients[g/capConc]
		wg.Go(func() {
			for i := 0; i < maxPer && time.Now().Before(end); i++ {
				t0 := time.Now()
				s := capSample{}
				resp, err := c.Get("http://service/")
				if err == nil {
					var b []byte
					b, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
					if err == nil {
						s.server = string(b)
					}
				}
				s.err = err
				s.lat = time.Since(t0)
				s.began = t0.Sub(start)
				r.samples[g] = append(r.samples[g], s)
			}
		})
	}
	wg.Wait()
}

// runCapacity drives every run at once on one schedule, so that the
// pickers share the machine's moments, and slows each run's big server
// at the change. The servers' work is real time; the loops end at the
// schedule's end.
func runCapacity(t *testing.T, runs []*capRun, ph capPhases) []capResult {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { r.drive(start, start.Add(ph.end())) })
	}
	select {
	case <-time.After(time.Until(start.Add(ph.change()))):
	case <-t.Context().Done():
	}
	for _, r := range runs {
		r.servers[0].mean.Store(int64(80 * time.Millisecond))
	}
	wg.Wait()
	out := make([]capResult, len(runs))
	for i, r := range runs {
		out[i] = r.result(start, ph)
	}
	return out
}

// result returns the shares and latencies of the requests begun in the
// measured windows.
func (r *capRun) result(start time.Time, ph capPhases) capResult {
	var res capResult
	count := func(from, to time.Duration) (shares []float64, n int, lats []time.Duration) {
		per := map[string]int{}
		for _, ss := range r.samples {
			for _, s := range ss {
				if s.err != nil || s.began < from || s.began >= to {
					continue
				}
				per[s.server]++
				n++
				lats = append(lats, s.lat)
			}
		}
		for _, s := range r.servers {
			shares = append(shares, float64(per[s.name])/float64(max(n, 1)))
		}
		return shares, n, lats
	}
	capShares := func(from, to time.Duration) []float64 {
		var c []float64
		sum := 0.0
		for _, s := range r.servers {
			c = append(c, s.capacity(start.Add(from), start.Add(to)))
			sum += c[len(c)-1]
		}
		for i := range c {
			c[i] /= max(sum, 1e-9)
		}
		return c
	}
	res.capBefore, res.capAfter = capShares(ph.warm, ph.change()), capShares(ph.afterFrom(), ph.end())
	var latB, latA []time.Duration
	perClient := func(from, to time.Duration) string {
		var b strings.Builder
		for c := range capClients {
			per := map[string]int{}
			n := 0
			for g := c * capConc; g < (c+1)*capConc; g++ {
				for _, s := range r.samples[g] {
					if s.err == nil && s.began >= from && s.began < to {
						per[s.server]++
						n++
					}
				}
			}
			var sh []float64
			for _, s := range r.servers {
				sh = append(sh, float64(per[s.name])/float64(max(n, 1)))
			}
			fmt.Fprintf(&b, " client %d: %s%% of %d;", c, fmtShares(sh), n)
		}
		return b.String()
	}
	res.clientsBefore, res.clientsAfter = perClient(ph.warm, ph.change()), perClient(ph.afterFrom(), ph.end())
	res.before, res.nBefore, latB = count(ph.warm, ph.change())
	res.after, res.nAfter, latA = count(ph.afterFrom(), ph.end())
	res.p99Before, res.p99After = capPercentile(latB, 0.99), capPercentile(latA, 0.99)
	res.p99 = capPercentile(append(latB, latA...), 0.99)
	for _, ss := range r.samples {
		for _, s := range ss {
			if s.err != nil {
				res.errs = append(res.errs, s.err)
			}
		}
	}
	return res
}

// The capacity shares, from the table at the top.
var (
	capSharesBefore = []float64{4.0 / 7, 2.0 / 7, 1.0 / 7}
	capSharesAfter  = []float64{0.25, 0.5, 0.25}
)

// shareMisses names each server whose share is more than tol from want.
func shareMisses(got, want []float64, tol float64) []string {
	var out []string
	for i, name := range []string{"big", "medium", "small"} {
		if math.Abs(got[i]-want[i]) > tol {
			out = append(out, fmt.Sprintf("%s %.1f%% (capacity %.1f%%)", name, 100*got[i], 100*want[i]))
		}
	}
	return out
}

func fmtShares(s []float64) string {
	var b strings.Builder
	for i, v := range s {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprintf(&b, "%.1f", 100*v)
	}
	return b.String()
}

// The share check tells apart what it must: capacity shares pass, the
// equal split that RoundRobin gives fails, before and after the change.
func TestShareMisses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []float64
		misses    int
	}{
		{"capacity before", capSharesBefore, capSharesBefore, 0},
		{"capacity after", capSharesAfter, capSharesAfter, 0},
		{"just inside", []float64{4.0/7 - 0.079, 2.0/7 + 0.04, 1.0/7 + 0.039}, capSharesBefore, 0},
		{"equal split before", []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, capSharesBefore, 2},
		{"equal split after", []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, capSharesAfter, 3},
		{"not following the change", capSharesBefore, capSharesAfter, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Len(t, shareMisses(tc.got, tc.want, capShareTol), tc.misses)
		})
	}
}

// TestCapDrawer checks the draws the tolerance rests on. The capped
// lognormal's mean, from its distribution: with X = exp(σZ − σ²/2) and
// σ = 1, E[X; X < 10] = Φ((ln 10 − σ²/2)/σ) = Φ(1.8026) = 0.96427 and
// P(X ≥ 10) = 1 − Φ((ln 10 + σ²/2)/σ) = 1 − Φ(2.8026) = 0.002534, so
// E[min(X, 10)] = 0.96427 + 10 × 0.002534 = 0.98962. Every block holds
// exactly half its draws below the median exp(−σ²/2). The mean of n
// consecutive draws varies by less than 13%, 9% and 6% of the mean at
// n = 30, 50, 100, where independent draws of the same distribution vary
// by more than 19%, 14%, 10%.
func TestCapDrawer(t *testing.T) {
	const blocks = 2000
	d := newCapDrawer(7)
	rng := rand.New(rand.NewPCG(7, 18))
	var strat, iid []float64
	for b := range blocks {
		below := 0
		for range capStrata {
			x := d.draw()
			strat = append(strat, x)
			if x < math.Exp(-capSigma*capSigma/2) {
				below++
			}
			iid = append(iid, min(math.Exp(capSigma*rng.NormFloat64()-capSigma*capSigma/2), 10))
		}
		require.Equal(t, capStrata/2, below, "block %d: draws below the median", b)
	}
	mean := 0.0
	for _, x := range strat {
		mean += x / float64(len(strat))
	}
	assert.InDelta(t, 0.98962, mean, 0.01, "mean of the capped lognormal")
	// spread is the standard deviation of the means of n consecutive
	// draws (every 7th start), relative to the distribution's mean.
	spread := func(xs []float64, n int) float64 {
		var ms []float64
		for i := 0; i+n <= len(xs); i += 7 {
			m := 0.0
			for _, x := range xs[i : i+n] {
				m += x / float64(n)
			}
			ms = append(ms, m/0.98962)
		}
		var s, s2 float64
		for _, m := range ms {
			s += m
			s2 += m * m
		}
		k := float64(len(ms))
		return math.Sqrt(s2/k - (s/k)*(s/k))
	}
	for _, tc := range []struct {
		n                int
		stratMax, iidMin float64
	}{{30, 0.13, 0.19}, {50, 0.09, 0.14}, {100, 0.06, 0.10}} {
		st, in := spread(strat, tc.n), spread(iid, tc.n)
		t.Logf("mean of %d draws varies by %.1f%% (independent draws: %.1f%%)", tc.n, 100*st, 100*in)
		assert.Less(t, st, tc.stratMax, "stratified, n = %d", tc.n)
		assert.Greater(t, in, tc.iidMin, "independent, n = %d", tc.n)
	}
}

// capWRROptions are ReportedWRR's settings for a fleet whose capacity
// changes within seconds, as its doc advises: a fresh report trusted at
// once, weights recomputed every 100 ms, and a report expiring after 2 s
// (the least picked server answers some 50 times a second).
var capWRROptions = []balancer.Option{
	balancer.WithBlackoutPeriod(0),
	balancer.WithWeightUpdatePeriod(100 * time.Millisecond),
	balancer.WithWeightExpirationPeriod(2 * time.Second),
}

// capReportedLoad makes the load-aware pickers weigh the servers' reported
// requests in flight (named_metrics.rif, which counts the requests queued
// for a worker too) as C3 does, for capClients clients, each report
// fading over a second (the servers answer each client many times a
// second).
var capReportedLoad = balancer.WithReportedLoad(time.Second, capClients)

// capAlgorithm returns a constructor for the registry's picker name.
func capAlgorithm(t *testing.T, name string, opts ...balancer.Option) func([]*balancer.Peer) (balancer.Balancer, error) {
	t.Helper()
	a, err := balancer.AlgorithmNamed(name)
	require.NoError(t, err)
	return func(peers []*balancer.Peer) (balancer.Balancer, error) { return a.New(peers, opts...) }
}

// TestCapacity_endToEnd runs the capacity scenario (top of this file) for
// every picker at once, each on a fleet of its own (runCapacity), so that
// their latencies come from the same moments of the machine. The
// report-driven picker's shares must follow capacity within capShareTol
// before and after the change; RoundRobin, the control, must miss.
//
// The p99s (of the requests begun in both windows, some 500 a picker: the
// 5th longest) are logged, not asserted. Over 20 runs, 10 under -race,
// ReportedWRR's ran 0.87 to 1.38 times P2CPeakEWMA's and RoundRobin's
// 1.28 to 1.91 times (the gRPC test's, 20 runs: 0.85 to 1.55 and 1.22 to
// 1.97): a bound ReportedWRR keeps on a busy 2-core machine would pass
// round robin too, so it would tell nothing. A58 weighs capacity, not
// backlog, so a picker that reads its own queues may beat it. The other
// pickers' shares are logged, P2CPeakEWMA's and LeastConn's also with the
// servers' reported requests in flight (+rif, WithReportedLoad). The test
// takes about 4 s, with -race too, so -short keeps it.
func TestCapacity_endToEnd(t *testing.T) {
	type variant struct {
		name    string
		new     func([]*balancer.Peer) (balancer.Balancer, error)
		shares  bool // must follow capacity
		control bool // must not
	}
	variants := []variant{
		{name: "ReportedWRR", new: capAlgorithm(t, "ReportedWRR", capWRROptions...), shares: true},
		{name: "P2CPeakEWMA", new: capAlgorithm(t, "P2CPeakEWMA")},
		{name: "LeastConn", new: capAlgorithm(t, "LeastConn")},
		{name: "P2CPeakEWMA+rif", new: capAlgorithm(t, "P2CPeakEWMA", capReportedLoad)},
		{name: "LeastConn+rif", new: capAlgorithm(t, "LeastConn", capReportedLoad)},
		{name: "RoundRobin", new: capAlgorithm(t, "RoundRobin"), control: true},
	}
	runs := make([]*capRun, len(variants))
	for i, v := range variants {
		runs[i] = newCapRun(t, v.new)
	}
	results := runCapacity(t, runs, capSchedule)
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := results[i]
			t.Logf("%s: shares big/medium/small before %s%% (%d requests), after %s%% (%d); realized capacity %s%%, %s%%; p99 before %v, after %v, both %v",
				v.name, fmtShares(r.before), r.nBefore, fmtShares(r.after), r.nAfter, fmtShares(r.capBefore), fmtShares(r.capAfter),
				r.p99Before.Round(time.Millisecond), r.p99After.Round(time.Millisecond), r.p99.Round(time.Millisecond))
			require.Empty(t, r.errs, "requests that failed")
			mb, ma := shareMisses(r.before, capSharesBefore, capShareTol), shareMisses(r.after, capSharesAfter, capShareTol)
			switch {
			case v.shares:
				assert.Empty(t, mb, "shares before the change, tolerance %.0f points; by client:%s", 100*capShareTol, r.clientsBefore)
				assert.Empty(t, ma, "shares after the change, tolerance %.0f points; by client:%s", 100*capShareTol, r.clientsAfter)
			case v.control:
				assert.NotEmpty(t, mb, "the control follows capacity before the change: the check tells nothing")
				assert.NotEmpty(t, ma, "the control follows capacity after the change: the check tells nothing")
			}
		})
	}
}
