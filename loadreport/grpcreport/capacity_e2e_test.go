package grpcreport_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/lbgo/balancer/loadreport"
	"github.com/lbgo/balancer/loadreport/grpcreport"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// The capacity end-to-end test over gRPC: the HTTP one's scenario
// (balancerhttp's capacity_e2e_test.go, which derives the shares and the
// tolerance) on real grpc-go servers running the Reporter, so that each
// reply carries its report in grpc-go's per-call ORCA trailer, and four
// ClientConns, each with its own policy instance and so its own picker.
//
// Capacity is workers / mean service time. Before the change:
//
//	big:    4 workers × 20 ms → 200 calls/s  (4/7 = 57.1%)
//	medium: 2 workers × 20 ms → 100 calls/s  (2/7 = 28.6%)
//	small:  2 workers × 40 ms →  50 calls/s  (1/7 = 14.3%)
//
// then big's mean service time becomes 80 ms: 50 calls/s, and the shares
// 25%, 50%, 25%. The clients keep capClients × capConc calls in flight
// (closed loop), more than the 8 workers, so calls queue.
//
// gRFC A58 weighs a server by qps / utilization; the server reports as
// utilization its busy workers over its workers averaged over the window
// of its qps (busyMeter), so the weight is the realized capacity of the
// window's calls. The service times are lognormal of shape 1, drawn in
// stratified blocks (capDrawer); their noise moves a share by 2 points or
// less, and capShareTol, 8 points, is four of those and less than the
// distance to the equal split round robin, the control, gives (24 points
// for big before the change, 17 for medium after), as balancerhttp's
// capacity_e2e_test.go derives.
const (
	capClients  = 4
	capConc     = 3
	capSigma    = 1.0
	capWindow   = time.Second // the Tracker's window
	capShareTol = 0.08
	capStrata   = 16 // draws per block, one from each stratum
)

// capPhases is the run's schedule: warm, measured before the change,
// change, settle (a window and 20%, so every report counts only calls
// served after the change, but for the few that straddle it), measured
// after.
type capPhases struct{ warm, before, settle, after time.Duration }

func (p capPhases) change() time.Duration    { return p.warm + p.before }
func (p capPhases) afterFrom() time.Duration { return p.change() + p.settle }
func (p capPhases) end() time.Duration       { return p.afterFrom() + p.after }

var capSchedule = capPhases{warm: 500 * time.Millisecond, before: time.Second, settle: 1200 * time.Millisecond, after: time.Second}

// busyMeter is a server's utilization: busy workers / workers averaged
// over the Tracker's window (ten buckets, spanning as loadreport's rate
// window does), each call's service time counted in the bucket of its
// completion; qps / utilization is then workers / the mean service time
// of the window's calls. See balancerhttp's busyMeter for why not the
// count at the reply or another span.
type busyMeter struct {
	workers float64
	width   time.Duration
	start   time.Time

	mu   sync.Mutex
	idx  [10]time.Duration // guarded by mu: each bucket's index
	busy [10]time.Duration // guarded by mu: service time completed in it
}

func newBusyMeter(workers int, window time.Duration) *busyMeter {
	m := &busyMeter{workers: float64(workers), width: window / 10, start: time.Now()}
	for i := range m.idx {
		m.idx[i] = -1
	}
	return m
}

func (m *busyMeter) done(d time.Duration) {
	cur := time.Since(m.start) / m.width
	m.mu.Lock()
	if b := cur % 10; m.idx[b] != cur {
		m.idx[b], m.busy[b] = cur, 0
	}
	m.busy[cur%10] += d
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
	span := max(min(9*m.width+e-cur*m.width, e), m.width)
	return sum.Seconds() / (m.workers * span.Seconds())
}

// capServer is a grpc-go server on loopback serving the health service
// with a fixed number of workers: a unary interceptor inside the
// Reporter's makes each call wait for a free worker and hold it for a
// service time from its capDrawer scaled to `mean`. The Reporter reports
// the busyMeter's utilization through its Tracker.
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
	s := &capServer{name: name, sem: make(chan struct{}, workers), busy: newBusyMeter(workers, capWindow), draws: newCapDrawer(seed)}
	s.mean.Store(int64(mean))
	tr, err := loadreport.NewTracker(loadreport.WithWindow(capWindow), loadreport.WithUtilization(s.busy.value))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := grpcreport.New(tr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(rep.ServerOptions(), grpc.ChainUnaryInterceptor(s.work))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

// capDrawer draws service times of mean 1 from a lognormal of shape
// capSigma, exp(σz − σ²/2), capped at 10 (mean 0.9896, as balancerhttp's
// TestCapDrawer derives), z the standard normal quantile of u. The u come in blocks of capStrata, one uniform in each
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

func (s *capServer) draw() time.Duration {
	s.mu.Lock()
	x := s.draws.draw()
	s.mu.Unlock()
	return time.Duration(x * float64(s.mean.Load()))
}

func (s *capServer) work(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	began := time.Now()
	tm := time.NewTimer(s.draw())
	select {
	case <-tm.C:
	case <-ctx.Done():
		tm.Stop()
	}
	took := time.Since(began)
	s.busy.done(took)
	s.mu.Lock()
	s.services = append(s.services, capService{began, took})
	s.mu.Unlock()
	<-s.sem
	return h(ctx, req)
}

type capSample struct {
	began, lat time.Duration // began: since the run began, the pick's time near enough
	addr       string
	err        error
}

type capResult struct {
	before, after       []float64 // each server's share of the calls begun in the window
	capBefore, capAfter []float64 // its share of the realized capacity (capServer.capacity) in the window
	// Each client's shares in each window, for a failure's message.
	clientsBefore, clientsAfter string
	nBefore, nAfter             int
	p99Before, p99After         time.Duration
	p99                         time.Duration
	errs                        []error
}

func capPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// capSchemes numbers the manual resolvers' schemes.
var capSchemes atomic.Int64

// capDial connects to the servers through a manual resolver of its own
// with the loadBalancingConfig lb: one policy instance, one picker.
func capDial(t *testing.T, lb string, servers []*capServer) *grpc.ClientConn {
	t.Helper()
	r := manual.NewBuilderWithScheme(fmt.Sprintf("capacity%d", capSchemes.Add(1)))
	var addrs []resolver.Address
	for _, s := range servers {
		addrs = append(addrs, resolver.Address{Addr: s.addr})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(r.Scheme()+":///servers", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[`+lb+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	return conn
}

// capRun is one policy's fleet: servers of its own and capClients
// ClientConns, each with its own policy instance and so its own picker.
type capRun struct {
	servers []*capServer
	conns   []*grpc.ClientConn
	samples [][]capSample // one list per client goroutine
}

func newCapRun(t *testing.T, lb string) *capRun {
	t.Helper()
	r := &capRun{servers: []*capServer{
		newCapServer(t, "big", 4, 20*time.Millisecond, 1),
		newCapServer(t, "medium", 2, 20*time.Millisecond, 2),
		newCapServer(t, "small", 2, 40*time.Millisecond, 3),
	}}
	for range capClients {
		r.conns = append(r.conns, capDial(t, lb, r.servers))
	}
	r.samples = make([][]capSample, capClients*capConc)
	return r
}

// drive sends calls (health checks, 5 s deadline) from capConc
// goroutines per ClientConn until end, each loop bounded to 1000 calls
// (several times what the servers can serve in the run), recording the
// peer each went to, and returns when all have ended.
func (r *capRun) drive(start, end time.Time) {
	const maxPer = 1000
	var wg sync.WaitGroup
	for g := range r.samples {
		client := healthpb.NewHealthClient(r.conns[g/capConc])
		wg.Go(func() {
			for i := 0; i < maxPer && time.Now().Before(end); i++ {
				var p peer.Peer
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
				cancel()
				s := capSample{err: err, lat: time.Since(t0), began: t0.Sub(start)}
				if err == nil && p.Addr != nil {
					s.addr = p.Addr.String()
				}
				r.samples[g] = append(r.samples[g], s)
			}
		})
	}
	wg.Wait()
}

// runCapacity drives every run at once on one schedule, so that the
// policies share the machine's moments, and slows each run's big server
// at the change.
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

// result returns the shares (by the peer each call went to) and
// latencies of the calls begun in the measured windows.
func (r *capRun) result(start time.Time, ph capPhases) capResult {
	servers, samples := r.servers, r.samples
	var res capResult
	count := func(from, to time.Duration) (shares []float64, n int, lats []time.Duration) {
		per := map[string]int{}
		for _, ss := range samples {
			for _, s := range ss {
				if s.err == nil && s.began >= from && s.began < to {
					per[s.addr]++
					n++
					lats = append(lats, s.lat)
				}
			}
		}
		for _, s := range servers {
			shares = append(shares, float64(per[s.addr])/float64(max(n, 1)))
		}
		return shares, n, lats
	}
	capShares := func(from, to time.Duration) []float64 {
		var c []float64
		sum := 0.0
		for _, s := range servers {
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
				for _, s := range samples[g] {
					if s.err == nil && s.began >= from && s.began < to {
						per[s.addr]++
						n++
					}
				}
			}
			var sh []float64
			for _, s := range servers {
				sh = append(sh, float64(per[s.addr])/float64(max(n, 1)))
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
	for _, ss := range samples {
		for _, s := range ss {
			if s.err != nil {
				res.errs = append(res.errs, s.err)
			}
		}
	}
	return res
}

var (
	capSharesBefore = []float64{4.0 / 7, 2.0 / 7, 1.0 / 7}
	capSharesAfter  = []float64{0.25, 0.5, 0.25}
)

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

// capWRRSettings are the short settings for both weighted round robins:
// no blackout, weights recomputed every 100 ms, a report expiring after
// 2 s.
const capWRRSettings = `"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","weightExpirationPeriod":"2s"`

// capReportedLoad makes the load-aware policies weigh the servers'
// reported requests in flight (rif, the calls queued for a worker
// included) as C3 does, for capClients clients, each report fading over a
// second.
const capReportedLoad = `"reportedLoad":{"window":"1s","clients":4}`

// TestCapacity_endToEnd runs the scenario for every policy at once, each
// on a fleet of its own, so that their latencies come from the same
// moments of the machine: lbgo_reportedwrr's shares and grpc-go's own
// weighted_round_robin's (the same reports, read by the real peer) must
// follow capacity within capShareTol before and after the change; round
// robin, the control, must miss. The p99s are logged, not asserted: over
// 20 runs, 10 under -race, lbgo_reportedwrr's ran 0.85 to 1.55 times
// lbgo_p2cpeakewma's and round robin's 1.22 to 1.97 times, so a bound
// that holds would pass round robin too (balancerhttp's capacity test
// says more). P2CPeakEWMA's and LeastConn's shares, also with the
// servers' reported requests in flight (+rif, reportedLoad), are logged
// too. About 4 s, with -race too.
func TestCapacity_endToEnd(t *testing.T) {
	type variant struct {
		name    string
		lb      string
		shares  bool // must follow capacity
		control bool // must not
	}
	variants := []variant{
		{name: "ReportedWRR", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("ReportedWRR"), capWRRSettings), shares: true},
		{name: "P2CPeakEWMA", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("P2CPeakEWMA"))},
		{name: "LeastConn", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("LeastConn"))},
		{name: "P2CPeakEWMA+rif", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("P2CPeakEWMA"), capReportedLoad)},
		{name: "LeastConn+rif", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("LeastConn"), capReportedLoad)},
		{name: "weighted_round_robin", lb: `{"weighted_round_robin":{` + capWRRSettings + `}}`, shares: true},
		{name: "RoundRobin", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("RoundRobin")), control: true},
	}
	runs := make([]*capRun, len(variants))
	for i, v := range variants {
		runs[i] = newCapRun(t, v.lb)
	}
	results := runCapacity(t, runs, capSchedule)
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := results[i]
			t.Logf("%s: shares big/medium/small before %s%% (%d calls), after %s%% (%d); realized capacity %s%%, %s%%; p99 before %v, after %v, both %v",
				v.name, fmtShares(r.before), r.nBefore, fmtShares(r.after), r.nAfter, fmtShares(r.capBefore), fmtShares(r.capAfter),
				r.p99Before.Round(time.Millisecond), r.p99After.Round(time.Millisecond), r.p99.Round(time.Millisecond))
			if len(r.errs) > 0 {
				t.Fatalf("%d calls failed, first: %v", len(r.errs), r.errs[0])
			}
			mb, ma := shareMisses(r.before, capSharesBefore, capShareTol), shareMisses(r.after, capSharesAfter, capShareTol)
			switch {
			case v.shares:
				if len(mb)+len(ma) > 0 {
					t.Errorf("shares off capacity by more than %.0f points: before the change %v, after %v; by client, before:%s after:%s",
						100*capShareTol, mb, ma, r.clientsBefore, r.clientsAfter)
				}
			case v.control:
				if len(mb) == 0 || len(ma) == 0 {
					t.Errorf("the control follows capacity (misses before %v, after %v): the check tells nothing", mb, ma)
				}
			}
		})
	}
}
