package sim

import (
	"math"
	"slices"
	"time"
)

// Result holds the metrics of one run. Latencies are those of whole
// requests, from arrival to the end of the last attempt, failed requests
// included at the time they failed; percentiles are exact, by nearest rank
// over every request.
//
// The share metrics follow the scenario's watched backend w, degraded over
// [t0, t1), whose fair share f is its weight's share. Attempts are counted
// per Bucket, and the smoothed share at the end of bucket k is w's fraction
// of the attempts sent in buckets k−SpanBuckets+1 to k (500 ms), reaching
// no further back than the start of the interval being measured:
//   - Divert is the end of the first bucket from which the smoothed share
//     stays at or below f/2 until t1, minus t0;
//   - Readmit is the end of the first bucket from which the smoothed share
//     stays at or above f/2 until the end of the run, minus t1.
//
// Both are in seconds: NaN where they do not apply (no watched backend, or
// a degradation from the start for Divert), +Inf when the condition never
// holds.
//
// The zero value is an empty result. A Result is not modified after Run
// returns it and may be read concurrently.
type Result struct {
	Scenario string
	Policy   string
	Seed     uint64

	Requests int // requests that arrived (all of them finish)
	Failed   int // requests that failed
	// Refused counts the failed requests that never had an attempt: the
	// picker had no eligible peer when they arrived (nginx's 502, "no
	// live upstreams"). They fail at once, with latency 0.
	Refused        int
	Attempts       int
	FailedAttempts int

	// Probes counts the probes the pickers sent (0 for a policy that does
	// not probe); ProbesFailed those answered Failed (a stalled backend,
	// a round trip past ProbeTimeout); ProbesRefused the answers the
	// picker refused (Answer returned an error). ProbeTime is the server
	// time spent answering probes, ProbeCost each; ServiceTime the worker
	// time spent serving requests, which probes do not occupy.
	Probes, ProbesFailed, ProbesRefused int
	ProbeTime, ServiceTime              time.Duration

	Mean, P50, P99, P999 time.Duration
	// Tail holds the latency at each level of TailLevels, by nearest rank
	// as the percentiles above.
	Tail []time.Duration
	// SteadyMean is the mean latency of the requests that arrived at or
	// after the scenario's Steady time.
	SteadyMean time.Duration

	Divert, Readmit float64
	// PeakShare is the watched backend's largest share of traffic, as a
	// multiple of its fair share, over the aligned 500 ms spans inside its
	// degraded interval (NaN without one). Sinkhole reports whether some
	// span's share exceeds the fair share by more than three binomial
	// standard deviations, sqrt(f(1−f)/n) for n attempts: more than noise
	// explains.
	PeakShare float64
	Sinkhole  bool
	// ProbeRate is the watched backend's attempts per second over the
	// second half of its degraded interval: the probe floor a failed peer
	// keeps (NaN without one).
	ProbeRate float64

	// Herd is the 99th percentile over time, sampled every 10 ms, of the
	// largest in-flight count of a backend over the mean across backends
	// (instants with nothing in flight left out): 1 is perfectly even, the
	// number of backends is everything on one.
	Herd float64
	// Churn is the mean total-variation distance between the traffic
	// shares of consecutive 500 ms spans: how much the split moves.
	Churn float64

	// The guard metrics, over the scenario's Window (see Measure):
	// WindowRequests counts the requests arriving in it, WindowFailed and
	// WindowRefused those of them that failed and that the picker refused
	// at once, WindowAttempts the attempts sent during it; WindowP99 and
	// BeforeP99 are the p99 latencies of the requests arriving in Window
	// and in the scenario's Before (WindowP99 only). BudgetRefused counts
	// the retries the clients' retry budgets refused, over the whole run.
	WindowRequests, WindowAttempts, WindowFailed, WindowRefused int
	WindowP99, BeforeP99                                        time.Duration
	BudgetRefused                                               int
	window                                                      Window // the scenario's, for the rates

	// The hedging metrics of a hedged policy (see Hedged), 0 for any
	// other: Hedges counts the hedges sent (among Attempts), HedgesWon
	// those that answered first with a success, HedgesRefused those the
	// budget refused, HedgesThrottled those the throttle held back (the
	// client's attempts failing, see Hedge), Cancelled the losers that left their backend's
	// queue unserved, and HedgeWaste the worker time spent serving losers
	// to their end.
	Hedges, HedgesWon, HedgesRefused, HedgesThrottled, Cancelled int
	HedgeWaste                                                   time.Duration

	// Picks counts the attempts sent to each backend in each Bucket,
	// bucket-major: Picks[k*Backends+i].
	Picks    []int32
	Backends int
	// Weights holds the first client's weight of each backend, as
	// Peer.State reports it, at the end of each Bucket, laid out as Picks:
	// for FastestFirst the weight it derives from latency (DerivedWeight),
	// for nginx's pickers the configured weight as failures lower it
	// (EffectiveWeight).
	Weights []int32
}

// TailLevels returns the quantile levels of Result.Tail, ascending: 1 −
// 10^−x for x from 0 to 4 in steps of 0.05, from the minimum (0) to
// p99.99, evenly spaced on the scale of a latency tail plot.
func TailLevels() []float64 {
	const steps = 80
	out := make([]float64, steps+1)
	for i := range out {
		out[i] = 1 - math.Pow(10, -4*float64(i)/steps)
	}
	return out
}

// ProbesPerRequest returns the probes sent per request.
func (r *Result) ProbesPerRequest() float64 { return ratio(r.Probes, r.Requests) }

// ProbeLoad returns the server time spent on probes over the worker time
// spent on requests: what probing adds to the servers' work.
func (r *Result) ProbeLoad() float64 {
	if r.ServiceTime == 0 {
		return 0
	}
	return float64(r.ProbeTime) / float64(r.ServiceTime)
}

// Amplification returns the attempts sent during the scenario's Window
// over the requests arriving in it: the load at the backends over the
// offered load.
func (r *Result) Amplification() float64 { return ratio(r.WindowAttempts, r.WindowRequests) }

// ErrorRate returns the fraction of requests that failed.
func (r *Result) ErrorRate() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Failed) / float64(r.Requests)
}

// Buckets returns the number of buckets in Picks.
func (r *Result) Buckets() int {
	if r.Backends == 0 {
		return 0
	}
	return len(r.Picks) / r.Backends
}

// Share returns backend i's share of the attempts sent in buckets [a, b),
// and how many attempts that is in all; 0 if none were sent.
func (r *Result) Share(i, a, b int) (share float64, total int) {
	var mine int
	for k := max(a, 0); k < min(b, r.Buckets()); k++ {
		row := r.Picks[k*r.Backends : (k+1)*r.Backends]
		mine += int(row[i])
		for _, v := range row {
			total += int(v)
		}
	}
	if total == 0 {
		return 0, 0
	}
	return float64(mine) / float64(total), total
}

// rank returns the index of the nearest-rank q-quantile among n sorted
// values: the smallest value with at least a fraction q of the values at
// or below it is the ⌈q·n⌉-th.
func rank(n int, q float64) int {
	return min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
}

// percentile returns the nearest-rank q-quantile of sorted.
func percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[rank(len(sorted), q)]
}

// quantiles returns the nearest-rank quantiles qs, ascending, of a, which
// it reorders: selection instead of a full sort, O(n) for a few quantiles.
func quantiles(a []int64, qs ...float64) []int64 {
	out := make([]int64, len(qs))
	if len(a) == 0 {
		return out
	}
	lo := 0 // a[:lo] holds only values at or below every later quantile
	for i, q := range qs {
		k := rank(len(a), q)
		if k >= lo {
			nth(a[lo:], k-lo)
			lo = k
		}
		out[i] = a[k]
	}
	return out
}

// nth reorders a so that a[k] is the value that sorting would put there,
// with nothing larger before it and nothing smaller after: Hoare's
// quickselect with a median-of-three pivot, which keeps equal values (many
// requests end exactly at a timeout) from degrading it.
func nth(a []int64, k int) {
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		pivot := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		// Now a[lo..j] <= pivot <= a[i..hi], and everything strictly
		// between j and i equals the pivot.
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return
		}
	}
}

func (w *world) result(policy string, seed uint64) *Result {
	r := &Result{
		Scenario:       w.sc.Name,
		Policy:         policy,
		Seed:           seed,
		Requests:       len(w.lat),
		Failed:         w.failed,
		Refused:        w.refused,
		Attempts:       w.attempts,
		FailedAttempts: w.failedAttempts,
		Probes:         w.probesSent,
		ProbesFailed:   w.probesFailed,
		ProbesRefused:  w.probesRefused,
		ProbeTime:      time.Duration(w.probesServed) * ProbeCost,
		ServiceTime:    time.Duration(w.serviceTime),
		Picks:          w.picks,
		Backends:       len(w.backends),
		Weights:        w.weights,
		Divert:         math.NaN(),
		Readmit:        math.NaN(),
		PeakShare:      math.NaN(),
		ProbeRate:      math.NaN(),
	}
	lat := w.lat
	var sum float64
	for _, v := range lat {
		sum += float64(v)
	}
	if len(lat) > 0 {
		r.Mean = time.Duration(math.Round(sum / float64(len(lat))))
	}
	q := quantiles(lat, 0.5, 0.99, 0.999)
	r.P50, r.P99, r.P999 = time.Duration(q[0]), time.Duration(q[1]), time.Duration(q[2])
	tail := quantiles(lat, TailLevels()...)
	r.Tail = make([]time.Duration, len(tail))
	for i, v := range tail {
		r.Tail[i] = time.Duration(v)
	}
	if w.steadyN > 0 {
		r.SteadyMean = time.Duration(math.Round(w.steadySum / float64(w.steadyN)))
	}
	if len(w.herd) > 0 {
		slices.Sort(w.herd)
		r.Herd = w.herd[rank(len(w.herd), 0.99)]
	}
	r.Churn = churn(r)
	r.WindowRequests, r.WindowAttempts = w.winRequests, w.winAttempts
	r.WindowFailed, r.WindowRefused, r.BudgetRefused = w.winFailed, w.winRefused, w.budgetRefused
	r.window = w.sc.Window
	r.WindowP99 = time.Duration(quantiles(w.winLat, 0.99)[0])
	r.BeforeP99 = time.Duration(quantiles(w.beforeLat, 0.99)[0])
	if h := w.h; h != nil {
		r.Hedges, r.HedgesWon, r.HedgesRefused, r.HedgesThrottled, r.Cancelled = h.sent, h.won, h.refused, h.throttled, h.left
		r.HedgeWaste = time.Duration(h.waste)
	}
	if from, to, ok := w.sc.Degraded(); ok {
		watch(r, w.sc.Watch, w.sc.FairShare(w.sc.Watch), from, to)
	}
	return r
}

// churn returns the mean total-variation distance between the share vectors
// of consecutive aligned spans.
func churn(r *Result) float64 {
	spans := r.Buckets() / SpanBuckets
	prev := make([]float64, r.Backends)
	cur := make([]float64, r.Backends)
	var sum float64
	n := 0
	for s := range spans {
		var total int
		clear(cur)
		for k := s * SpanBuckets; k < (s+1)*SpanBuckets; k++ {
			for i, v := range r.Picks[k*r.Backends : (k+1)*r.Backends] {
				cur[i] += float64(v)
				total += int(v)
			}
		}
		if total == 0 {
			continue
		}
		for i := range cur {
			cur[i] /= float64(total)
		}
		if s > 0 {
			var d float64
			for i := range cur {
				d += math.Abs(cur[i] - prev[i])
			}
			sum += d / 2
			n++
		}
		prev, cur = cur, prev
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// watch fills in the metrics of the watched backend i, of fair share f,
// degraded over [from, to).
func watch(r *Result, i int, f float64, from, to time.Duration) {
	nb := r.Buckets()
	bucket := int64(Bucket)
	k0 := int((int64(from) + bucket - 1) / bucket) // first bucket inside
	k1 := min(int(int64(to)/bucket), nb)           // first bucket past the end
	smooth := func(start, k int) float64 {
		s, _ := r.Share(i, max(start, k-SpanBuckets+1), k+1)
		return s
	}
	// end converts "from the end of bucket k on" into seconds after t.
	end := func(k int, t time.Duration) float64 {
		return (time.Duration(int64(k+1)*bucket) - t).Seconds()
	}

	if from > 0 && k0 < k1 {
		last := k0 - 1 // the last bucket where the share is still too high
		for k := k1 - 1; k >= k0; k-- {
			if smooth(k0, k) > f/2 {
				last = k
				break
			}
		}
		if last == k1-1 {
			r.Divert = math.Inf(1)
		} else {
			r.Divert = end(last+1, from)
		}
	}

	if k2 := int((int64(to) + bucket - 1) / bucket); k2 < nb {
		last := k2 - 1
		for k := nb - 1; k >= k2; k-- {
			if smooth(k2, k) < f/2 {
				last = k
				break
			}
		}
		if last == nb-1 {
			r.Readmit = math.Inf(1)
		} else {
			r.Readmit = end(last+1, to)
		}
	}

	if k0 < k1 {
		r.PeakShare = 0
		for a := k0; a+SpanBuckets <= k1; a += SpanBuckets {
			s, n := r.Share(i, a, a+SpanBuckets)
			r.PeakShare = max(r.PeakShare, s/f)
			if n > 0 && s > f+3*math.Sqrt(f*(1-f)/float64(n)) {
				r.Sinkhole = true
			}
		}
		mid := (k0 + k1) / 2
		var sent int
		for k := mid; k < k1; k++ {
			sent += int(r.Picks[k*r.Backends+i])
		}
		r.ProbeRate = float64(sent) / (float64(k1-mid) * Bucket.Seconds())
	}
}
