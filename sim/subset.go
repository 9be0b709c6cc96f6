package sim

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lbgo/balancer"
)

// SubsetScenario names the subsetting comparison ([CompareSubsets]).
const SubsetScenario = "subset300"

// SubsetFleet is the subsetting comparison's fleet: Clients clients over
// Backends identical M/M/1 backends (10 ms, one worker) at Load of their
// capacity for Duration, each client balancing over its subset of Size
// with round robin; and the scale events whose churn it measures, Up
// backends added and Down removed (each from the fleet of Backends).
//
// The zero value is not usable; see DefaultSubsetFleet. A SubsetFleet is
// a plain value, safe to share.
type SubsetFleet struct {
	Clients, Backends, Size int
	Load                    float64
	Duration                time.Duration
	Up, Down                int
}

// DefaultSubsetFleet is the SRE book's fleet (chapter 20): 300 clients,
// 300 backends, subsets of 30, at 0.7 of capacity for 4 s (84,000
// requests, 280 a backend: enough for requests per backend to show the
// connections' spread, as round robin spreads each client's requests
// evenly over its subset), and scale events of ±10% (30 backends).
func DefaultSubsetFleet() SubsetFleet {
	return SubsetFleet{Clients: 300, Backends: 300, Size: 30, Load: 0.7, Duration: 4 * time.Second, Up: 30, Down: 30}
}

// SubsetPolicy is one way to choose each client's subset: By returns
// client c's Subsetter in a run with the given seed (nil By: no
// subsetting, every client over every backend).
type SubsetPolicy struct {
	Name string
	By   func(f SubsetFleet, c int, seed uint64) (balancer.Subsetter, error)
}

// SubsetPolicies returns the subsettings compared: none, the SRE book's
// deterministic subsetting, the ring, rendezvous with a key per client
// (drawn from the seed) and gRFC A68's random subsetting (a seed per
// client).
func SubsetPolicies() []SubsetPolicy {
	return []SubsetPolicy{
		{Name: "none"},
		{Name: "deterministic", By: func(f SubsetFleet, c int, _ uint64) (balancer.Subsetter, error) {
			return balancer.DeterministicSubsetter(c, f.Clients, f.Size)
		}},
		{Name: "ring", By: func(f SubsetFleet, c int, _ uint64) (balancer.Subsetter, error) {
			return balancer.RingSubsetter(c, f.Clients, f.Size)
		}},
		{Name: "rendezvous", By: func(f SubsetFleet, c int, seed uint64) (balancer.Subsetter, error) {
			return balancer.RendezvousSubsetter(fmt.Sprintf("client-%d-%d", seed, c), f.Size)
		}},
		{Name: "random", By: func(f SubsetFleet, c int, seed uint64) (balancer.Subsetter, error) {
			return balancer.RandomSubsetter(f.Size, stream(seed, SubsetScenario, "subset", c).Uint64())
		}},
	}
}

// SubsetSummary is one subsetting over the seeds. Connections count, for
// each backend, the clients whose subset holds it; ConnMax and ConnMin are
// the most and least connected backend's count over the mean, ConnSpread
// the most minus the least (±1 is a spread of 1 at most), at the start and
// after each scale event (Up, Down). LoadMax is the most loaded backend's
// requests over the mean; P50 and P99 the requests' latency in ms. Churn
// counts, per client, the members of its subset that a scale event takes
// out: the mean over the clients, and the most.
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

// subsetScenario is the fleet as a scenario: its request figures come
// from the engine, the subsets from the policies.
func subsetScenario(f SubsetFleet) Scenario {
	s := Scenario{
		Name:     SubsetScenario,
		Title:    fmt.Sprintf("%d clients over %d M/M/1 backends (10 ms), subsets of %d, round robin in each", f.Clients, f.Backends, f.Size),
		Load:     f.Load,
		Clients:  f.Clients,
		Duration: f.Duration,
		Watch:    -1,
	}
	for range f.Backends {
		s.Backends = append(s.Backends, mm1(100, 1))
	}
	return s
}

// subsetPolicy is p as the engine's policy: each client's round robin
// wrapped in a balancer.Subset. The engine builds a run's clients in
// order, 0 first, so the factory counts them.
func subsetPolicy(f SubsetFleet, p SubsetPolicy, seed uint64) Policy {
	rr, _ := balancer.AlgorithmNamed("RoundRobin")
	inner := factory(rr)
	return Policy{Name: p.Name, New: inner, fleet: func(int) Factory {
		c := 0
		return func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
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
			return balancer.NewSubset(in.(balancer.Balancer), peers, by)
		}
	}}
}

// backendKeys are the keys the engine gives its backends' peers.
func backendKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("b%d", i)
	}
	return keys
}

// subsetsOf returns every client's subset of keys, as sets of keys.
func subsetsOf(f SubsetFleet, p SubsetPolicy, seed uint64, keys []string) ([]map[string]bool, error) {
	out := make([]map[string]bool, f.Clients)
	for c := range out {
		m := make(map[string]bool)
		if p.By == nil {
			for _, k := range keys {
				m[k] = true
			}
		} else {
			by, err := p.By(f, c, seed)
			if err != nil {
				return nil, err
			}
			for _, i := range by.Subset(keys) {
				m[keys[i]] = true
			}
		}
		out[c] = m
	}
	return out, nil
}

// connections returns the most and least connected backend of keys over
// the mean, and their difference in clients.
func connectionSpread(subsets []map[string]bool, keys []string) (hi, lo, spread float64) {
	count := make(map[string]int, len(keys))
	total := 0
	for _, s := range subsets {
		for k := range s {
			count[k]++
			total++
		}
	}
	mn, mx := math.MaxInt, 0
	for _, k := range keys {
		mn, mx = min(mn, count[k]), max(mx, count[k])
	}
	mean := float64(total) / float64(len(keys))
	return float64(mx) / mean, float64(mn) / mean, float64(mx - mn)
}

// subsetChurn returns the mean and the most members of before's subsets
// not in after's.
func subsetChurn(before, after []map[string]bool) (mean, most float64) {
	sum := 0
	for c, s := range before {
		n := 0
		for k := range s {
			if !after[c][k] {
				n++
			}
		}
		sum += n
		most = max(most, float64(n))
	}
	return float64(sum) / float64(len(before)), most
}

// scaleEvents returns the fleet's keys after adding up backends (named on from
// the last) and after removing down of them (every backends/down-th from
// the middle of each stride, spread over the order).
func scaleEvents(f SubsetFleet) (up, down []string) {
	up = backendKeys(f.Backends + f.Up)
	for i, k := range backendKeys(f.Backends) {
		if f.Down == 0 || i%(f.Backends/f.Down) != f.Backends/f.Down/2 || len(down) >= f.Backends-f.Down {
			down = append(down, k)
		}
	}
	return up, down
}

// CompareSubsets runs each subsetting over fleet f with o.Seeds seeds: the
// requests in the engine (Run, every client's round robin wrapped in a
// balancer.Subset), the connections and the scale events' churn from the
// subsets themselves. The scale events are applied to the subsets, not
// inside the engine's run: their churn is the Subsetter's alone, and the
// request figures are those of the steady fleet.
func CompareSubsets(f SubsetFleet, pols []SubsetPolicy, o Options) (*SubsetReport, error) {
	switch {
	case f.Clients < 1 || f.Backends < 1 || f.Size < 1 || f.Up < 0 || f.Down < 0 || f.Down >= f.Backends:
		return nil, invalid("sim: subset fleet %+v: counts out of range", f)
	case o.Seeds < 0 || o.Parallel < 0:
		return nil, invalid("sim: negative Seeds %d or Parallel %d", o.Seeds, o.Parallel)
	}
	sc := subsetScenario(f)
	seeds := make([]uint64, max(o.Seeds, 1))
	for i := range seeds {
		seeds[i] = o.Seed + uint64(i)
	}
	// The engine's runs: for each seed, every subsetting at once (each
	// seed's rendezvous keys and random seeds are its own).
	runs := make([][]*Result, len(pols)) // [policy][seed]
	for _, seed := range seeds {
		var engine []Policy
		for _, p := range pols {
			engine = append(engine, subsetPolicy(f, p, seed))
		}
		r, err := Compare([]Scenario{sc}, engine, Options{Seeds: 1, Seed: seed, Parallel: o.Parallel})
		if err != nil {
			return nil, err
		}
		for pi := range pols {
			runs[pi] = append(runs[pi], r.Summaries[0][pi].Runs[0])
		}
	}
	rep := &SubsetReport{Fleet: f, Seeds: seeds}
	keys := backendKeys(f.Backends)
	up, down := scaleEvents(f)
	for pi, p := range pols {
		s := SubsetSummary{Policy: p.Name}
		var cmax, cmin, cspread, uspread, dspread, load, p50, p99, uc, ucm, dc, dcm []float64
		for k, seed := range seeds {
			run := runs[pi][k]
			s.Requests += run.Requests
			load = append(load, loadMax(run))
			p50 = append(p50, millis(run.P50))
			p99 = append(p99, millis(run.P99))
			base, err := subsetsOf(f, p, seed, keys)
			if err != nil {
				return nil, err
			}
			hi, lo, sp := connectionSpread(base, keys)
			cmax, cmin, cspread = append(cmax, hi), append(cmin, lo), append(cspread, sp)
			grown, err := subsetsOf(f, p, seed, up)
			if err != nil {
				return nil, err
			}
			shrunk, err := subsetsOf(f, p, seed, down)
			if err != nil {
				return nil, err
			}
			_, _, sp = connectionSpread(grown, up)
			uspread = append(uspread, sp)
			_, _, sp = connectionSpread(shrunk, down)
			dspread = append(dspread, sp)
			m, most := subsetChurn(base, grown)
			uc, ucm = append(uc, m), append(ucm, most)
			m, most = subsetChurn(base, shrunk)
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

// loadMax is the most loaded backend's attempts over the mean.
func loadMax(r *Result) float64 {
	per := make([]int64, r.Backends)
	var total int64
	for k, n := range r.Picks {
		per[k%r.Backends] += int64(n)
		total += int64(n)
	}
	var most int64
	for _, n := range per {
		most = max(most, n)
	}
	return float64(most) * float64(r.Backends) / float64(total)
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
	title := fmt.Sprintf("%s: %d clients over %d M/M/1 backends (10 ms), subsets of %d, round robin in each client's subset; load %.2f for %v; scale events +%d and -%d backends; %d seeds",
		SubsetScenario, f.Clients, f.Backends, f.Size, f.Load, f.Duration, f.Up, f.Down, len(r.Seeds))
	head := []string{"subsetting", "conns max/mean", "conns min/mean", "conns max-min", "+10% max-min", "-10% max-min", "requests max/mean", "p50 ms", "p99 ms", "+10% churn mean", "+10% churn max", "-10% churn mean", "-10% churn max"}
	var rows [][]string
	for _, s := range r.Summaries {
		rows = append(rows, []string{s.Policy,
			num(s.ConnMax.Mean, 2), num(s.ConnMin.Mean, 2), num(s.ConnSpread.Mean, 1), num(s.UpSpread.Mean, 1), num(s.DownSpread.Mean, 1),
			num(s.LoadMax.Mean, 3), num(s.P50.Mean, 1), num(s.P99.Mean, 1),
			num(s.UpChurn.Mean, 2), num(s.UpChurnMax.Mean, 1), num(s.DownChurn.Mean, 2), num(s.DownChurnMax.Mean, 1)})
	}
	legend := "conns: clients whose subset holds a backend, over the mean (max-min in clients; ±1 is 1 at most), at the start and after each scale event; requests: the most loaded backend's over the mean; churn: members of a client's subset a scale event takes out, mean over the clients and the most. Means over the seeds."
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
