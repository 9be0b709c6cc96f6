package sim

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/subset"
)

// SubsetScenario names the subsetting comparison ([CompareSubsets]).
const SubsetScenario = "subset300"

// SubsetFleet is the subsetting comparison's fleet: Clients clients over
// Backends identical M/M/1 backends (10 ms, one worker), each client
// balancing over its subset of Size with round robin, at a rate of Load of
// the Backends' capacity. For Steady the fleet is Backends; then Up
// backends join (a scale-up) and every client's picker is updated; after
// Phase, Down of those backends leave (a scale-down), spread over the
// list, and the fleet runs another Phase.
//
// The zero value is not usable; see DefaultSubsetFleet. A SubsetFleet is
// a plain value, safe to share.
type SubsetFleet struct {
	Clients, Backends, Size int
	Load                    float64
	Steady, Phase           time.Duration
	Up, Down                int
}

// DefaultSubsetFleet is the SRE book's fleet (chapter 20): 300 clients,
// 300 backends, subsets of 30, at 0.7 of the 300 backends' capacity
// (21,000 requests a second), 3 s steady (about 210 requests a backend:
// round robin spreads each client's requests evenly over its subset, so
// the backends' requests follow their connections closely), then +10%
// (30 backends joining) for 1.5 s and -10% (33 of the 330 leaving) for
// 1.5 s.
func DefaultSubsetFleet() SubsetFleet {
	return SubsetFleet{Clients: 300, Backends: 300, Size: 30, Load: 0.7, Steady: 3 * time.Second, Phase: 1500 * time.Millisecond, Up: 30, Down: 33}
}

// SubsetPolicy is one way to choose each client's subset: By returns
// client c's Subsetter in a run with the given seed (nil By: no
// subsetting, every client over every backend).
type SubsetPolicy struct {
	Name string
	By   func(f SubsetFleet, c int, seed uint64) (subset.Subsetter, error)
}

// SubsetPolicies returns the subsettings compared: none, the SRE book's
// deterministic subsetting, the ring, rendezvous with a key per client
// (drawn from the seed) and gRFC A68's random subsetting (a seed per
// client).
func SubsetPolicies() []SubsetPolicy {
	return []SubsetPolicy{
		{Name: "none"},
		{Name: "deterministic", By: func(f SubsetFleet, c int, _ uint64) (subset.Subsetter, error) {
			return subset.Deterministic(c, f.Clients, f.Size)
		}},
		{Name: "ring", By: func(f SubsetFleet, c int, _ uint64) (subset.Subsetter, error) {
			return subset.Ring(c, f.Clients, f.Size)
		}},
		{Name: "rendezvous", By: func(f SubsetFleet, c int, seed uint64) (subset.Subsetter, error) {
			return subset.Rendezvous(fmt.Sprintf("client-%d-%d", seed, c), f.Size)
		}},
		{Name: "random", By: func(f SubsetFleet, c int, seed uint64) (subset.Subsetter, error) {
			return subset.Random(f.Size, stream(seed, SubsetScenario, "subset", c).Uint64())
		}},
	}
}

// SubsetSummary is one subsetting over the seeds. Connections count, for
// each backend, the clients whose subset holds it (each client's picker's
// peers); ConnMax and ConnMin are the most and least connected backend's
// count over the mean, ConnSpread the most minus the least (±1 is a spread
// of 1 at most), in the steady fleet, and UpSpread and DownSpread after
// each scale event. LoadMax is the most loaded backend's requests over the
// mean in the steady fleet; P50 and P99 the latency of every request of
// the run, in ms. Churn counts, per client, the members of its subset that
// a scale event took out, as its picker's Update left them: the mean over
// the clients, and the most.
//
// The zero value is empty. A SubsetSummary is not modified once
// CompareSubsets returns it.
type SubsetSummary struct {
	Policy                       string
	ConnMax, ConnMin, ConnSpread Stat
	UpSpread, DownSpread         Stat
	LoadMax, P50, P99            Stat
	UpChurn, UpChurnMax          Stat
	DownChurn, DownChurnMax      Stat
	Requests                     int // over every seed
}

// SubsetReport is the outcome of CompareSubsets.
type SubsetReport struct {
	Fleet     SubsetFleet
	Seeds     []uint64
	Summaries []SubsetSummary
}

// subsetScenario is the fleet as a scenario: every backend that ever
// serves, the joining ones included; the clients hold the first Backends
// of them at the start (see subsetPolicy).
func subsetScenario(f SubsetFleet) Scenario {
	s := Scenario{
		Name:     SubsetScenario,
		Title:    fmt.Sprintf("%d clients over %d M/M/1 backends (10 ms), subsets of %d, round robin in each", f.Clients, f.Backends, f.Size),
		Rate:     f.Load * float64(f.Backends) * 100,
		Clients:  f.Clients,
		Duration: f.Steady + 2*f.Phase,
		Watch:    -1,
	}
	for range f.Backends + f.Up {
		s.Backends = append(s.Backends, mm1(100, 1))
	}
	return s
}

// subsetPolicy is p as the engine's policy: each client's round robin over
// the first f.Backends peers, wrapped in a subset.Subset. The engine
// builds a run's clients in order, 0 first, so the factory counts them.
func subsetPolicy(f SubsetFleet, p SubsetPolicy, seed uint64) Policy {
	rr, _ := balancer.AlgorithmNamed("RoundRobin")
	inner := factory(rr)
	return Policy{Name: p.Name, New: inner, fleet: func(int) Factory {
		c := 0
		return func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
			peers = peers[:f.Backends]
			if p.By == nil {
				return inner(peers, now, src)
			}
			by, err := p.By(f, c, seed)
			c++
			if err != nil {
				return nil, err
			}
			in, err := inner(nil, now, src)
			if err != nil {
				return nil, err
			}
			return subset.New(in.(balancer.Balancer), peers, by)
		}
	}}
}

// phases returns the backends every client holds in each phase: the
// steady fleet, after the scale-up, after the scale-down (every
// (Backends+Up)/Down-th, from the middle of its stride).
func (f SubsetFleet) phases() [3][]int32 {
	var ph [3][]int32
	for i := range f.Backends {
		ph[0] = append(ph[0], int32(i))
	}
	for i := range f.Backends + f.Up {
		ph[1] = append(ph[1], int32(i))
	}
	stride, removed := (f.Backends+f.Up)/max(f.Down, 1), 0
	for _, i := range ph[1] {
		if f.Down > 0 && removed < f.Down && int(i)%stride == stride/2 {
			removed++
			continue
		}
		ph[2] = append(ph[2], i)
	}
	return ph
}

// subsetRun is the state of the scale events in one run: the events to
// come, the clients per backend in each phase and the members each client
// lost at each event.
type subsetRun struct {
	at     []int64   // when each event to come happens
	next   [][]int32 // and the backends every client holds from then on
	conns  [][]int   // [phase][backend]: clients whose picker holds it
	churn  [][]int   // [event][client]
	phases [3][]int32
}

// advance applies the scale events due by t, before the event at t.
func (s *subsetRun) advance(w *world, t int64) {
	for len(s.at) > 0 && s.at[0] <= t && w.err == nil {
		w.now = s.at[0]
		s.apply(w, s.next[0])
		s.at, s.next = s.at[1:], s.next[1:]
	}
}

// apply hands every client's picker the new backend list, as a discovery
// update would, and counts what each lost.
func (s *subsetRun) apply(w *world, active []int32) {
	lost := make([]int, len(w.clients))
	for c := range w.clients {
		cl := &w.clients[c]
		u := cl.picker.(balancer.Updater) // round robin, or a Subset over it
		before := u.Peers()
		snapshot := make([]*balancer.Peer, len(active))
		for i, b := range active {
			snapshot[i] = cl.peers[b]
		}
		if err := u.Update(snapshot); err != nil {
			w.err = fmt.Errorf("client %d: scale event: %w", c, err)
			return
		}
		after := map[*balancer.Peer]bool{}
		for _, p := range u.Peers() {
			after[p] = true
		}
		for _, p := range before {
			if !after[p] {
				lost[c]++
			}
		}
	}
	s.churn = append(s.churn, lost)
	s.count(w)
}

// count records the clients whose picker holds each backend.
func (s *subsetRun) count(w *world) {
	n := make([]int, len(w.backends))
	for c := range w.clients {
		cl := &w.clients[c]
		for _, p := range cl.picker.(balancer.Updater).Peers() {
			n[cl.index[p]]++
		}
	}
	s.conns = append(s.conns, n)
}

// runSubsets is one run of the fleet under p with seed: the engine's
// Result and the scale events' record.
func runSubsets(f SubsetFleet, sc *Scenario, p SubsetPolicy, seed uint64) (*Result, *subsetRun, error) {
	pol := subsetPolicy(f, p, seed)
	w, err := newWorld(sc, pol, seed)
	if err != nil {
		return nil, nil, err
	}
	ph := f.phases()
	w.subset = &subsetRun{
		at:     []int64{int64(f.Steady), int64(f.Steady + f.Phase)},
		next:   [][]int32{ph[1], ph[2]},
		phases: ph,
	}
	w.subset.count(w)
	w.loop()
	if w.err != nil {
		return nil, nil, fmt.Errorf("sim: %s under %s, seed %d: %w", sc.Name, p.Name, seed, w.err)
	}
	return w.result(p.Name, seed), w.subset, nil
}

// spread returns the most and least connected of the backends active
// over the mean, and their difference in clients.
func spread(conns []int, active []int32) (hi, lo, diff float64) {
	mn, mx, total := math.MaxInt, 0, 0
	for _, b := range active {
		mn, mx, total = min(mn, conns[b]), max(mx, conns[b]), total+conns[b]
	}
	mean := float64(total) / float64(len(active))
	return float64(mx) / mean, float64(mn) / mean, float64(mx - mn)
}

// meanMax returns the mean and the most of v.
func meanMax(v []int) (mean, most float64) {
	sum := 0
	for _, n := range v {
		sum += n
		most = max(most, float64(n))
	}
	return float64(sum) / float64(len(v)), most
}

// CompareSubsets runs each subsetting over fleet f with o.Seeds seeds,
// every client's round robin wrapped in a subset.Subset, with the scale
// events inside the run: at each, every client's picker gets the new
// backend list through Update, as a discovery update would deliver it.
// Runs go on o.Parallel goroutines; the report does not depend on how
// many.
func CompareSubsets(f SubsetFleet, pols []SubsetPolicy, o Options) (*SubsetReport, error) {
	switch {
	case f.Clients < 1 || f.Backends < 1 || f.Size < 1 || f.Up < 0 || f.Down < 0 || f.Down >= f.Backends+f.Up ||
		f.Steady <= 0 || f.Phase <= 0 || !(f.Load > 0 && f.Load < 1):
		return nil, invalid("sim: subset fleet %+v: out of range", f)
	case o.Seeds < 0 || o.Parallel < 0:
		return nil, invalid("sim: negative Seeds %d or Parallel %d", o.Seeds, o.Parallel)
	}
	sc := subsetScenario(f)
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	if err := checkCompare([]Scenario{sc}, len(pols), max(o.Seeds, 1), par); err != nil {
		return nil, err
	}
	seeds := make([]uint64, max(o.Seeds, 1))
	for i := range seeds {
		seeds[i] = o.Seed + uint64(i)
	}
	n := len(pols) * len(seeds)
	results, records, errs := make([]*Result, n), make([]*subsetRun, n), make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= n {
					return
				}
				results[j], records[j], errs[j] = runSubsets(f, &sc, pols[j/len(seeds)], seeds[j%len(seeds)])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	rep := &SubsetReport{Fleet: f, Seeds: seeds}
	steadyBuckets := int(f.Steady / Bucket)
	for pi, p := range pols {
		s := SubsetSummary{Policy: p.Name}
		var cmax, cmin, cspread, uspread, dspread, load, p50, p99, uc, ucm, dc, dcm []float64
		for k := range seeds {
			run, rec := results[pi*len(seeds)+k], records[pi*len(seeds)+k]
			s.Requests += run.Requests
			load = append(load, loadMax(run, steadyBuckets, rec.phases[0]))
			p50 = append(p50, millis(run.P50))
			p99 = append(p99, millis(run.P99))
			hi, lo, d := spread(rec.conns[0], rec.phases[0])
			cmax, cmin, cspread = append(cmax, hi), append(cmin, lo), append(cspread, d)
			_, _, d = spread(rec.conns[1], rec.phases[1])
			uspread = append(uspread, d)
			_, _, d = spread(rec.conns[2], rec.phases[2])
			dspread = append(dspread, d)
			m, most := meanMax(rec.churn[0])
			uc, ucm = append(uc, m), append(ucm, most)
			m, most = meanMax(rec.churn[1])
			dc, dcm = append(dc, m), append(dcm, most)
		}
		s.ConnMax, s.ConnMin, s.ConnSpread = stat(cmax), stat(cmin), stat(cspread)
		s.UpSpread, s.DownSpread = stat(uspread), stat(dspread)
		s.LoadMax, s.P50, s.P99 = stat(load), stat(p50), stat(p99)
		s.UpChurn, s.UpChurnMax, s.DownChurn, s.DownChurnMax = stat(uc), stat(ucm), stat(dc), stat(dcm)
		rep.Summaries = append(rep.Summaries, s)
	}
	return rep, nil
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadMax is the most loaded of the backends active over the mean, in
// the attempts of the first buckets.
func loadMax(r *Result, buckets int, active []int32) float64 {
	per := make([]int64, r.Backends)
	for k := range min(buckets, r.Buckets()) {
		for i, n := range r.Picks[k*r.Backends : (k+1)*r.Backends] {
			per[i] += int64(n)
		}
	}
	var most, total int64
	for _, b := range active {
		most, total = max(most, per[b]), total+per[b]
	}
	return float64(most) * float64(len(active)) / float64(total)
}

// Find returns the summary of the subsetting called policy.
func (r *SubsetReport) Find(policy string) (*SubsetSummary, bool) {
	for i := range r.Summaries {
		if r.Summaries[i].Policy == policy {
			return &r.Summaries[i], true
		}
	}
	return nil, false
}

// Write prints the report as a table, or as a markdown table.
func (r *SubsetReport) Write(w io.Writer, markdown bool) error {
	ew := &errWriter{w: w}
	f := r.Fleet
	title := fmt.Sprintf("%s: %d clients over %d M/M/1 backends (10 ms), subsets of %d, round robin in each client's subset; %.0f requests a second (load %.2f) for %v, then %d backends join (+%.0f%%) for %v, then %d of them leave (-%.0f%%) for %v; %d seeds",
		SubsetScenario, f.Clients, f.Backends, f.Size, f.Load*float64(f.Backends)*100, f.Load, f.Steady, f.Up, 100*float64(f.Up)/float64(f.Backends), f.Phase,
		f.Down, 100*float64(f.Down)/float64(f.Backends+f.Up), f.Phase, len(r.Seeds))
	head := []string{"subsetting", "conns max/mean", "conns min/mean", "conns max-min", "+10% max-min", "-10% max-min", "requests max/mean", "p50 ms", "p99 ms", "+10% churn mean", "+10% churn max", "-10% churn mean", "-10% churn max"}
	var rows [][]string
	for _, s := range r.Summaries {
		rows = append(rows, []string{s.Policy,
			num(s.ConnMax.Mean, 2), num(s.ConnMin.Mean, 2), num(s.ConnSpread.Mean, 1), num(s.UpSpread.Mean, 1), num(s.DownSpread.Mean, 1),
			num(s.LoadMax.Mean, 3), num(s.P50.Mean, 1), num(s.P99.Mean, 1),
			num(s.UpChurn.Mean, 2), num(s.UpChurnMax.Mean, 1), num(s.DownChurn.Mean, 2), num(s.DownChurnMax.Mean, 1)})
	}
	legend := "conns: clients whose picker holds a backend, over the mean (max-min in clients; ±1 is 1 at most), in the steady fleet and after each scale event; requests: the most loaded backend's over the mean, in the steady fleet; p50, p99: every request of the run; churn: members of a client's subset a scale event took out (its picker's Update), mean over the clients and the most. Means over the seeds."
	if markdown {
		fmt.Fprintf(ew, "### %s\n\n%s\n\n", SubsetScenario, title)
		fmt.Fprintf(ew, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat(" --- |", len(head)))
		for _, row := range rows {
			fmt.Fprintf(ew, "| %s |\n", strings.Join(row, " | "))
		}
		fmt.Fprintf(ew, "\n%s\n", legend)
		return ew.err
	}
	fmt.Fprintf(ew, "%s\n", title)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", strings.Join(head, "\t"))
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Fprintf(ew, "%s\n", legend)
	return ew.err
}
