package sim

import (
	"time"

	"github.com/lbgo/balancer"
)

// ReportWindow is the window over which a simulated backend counts the
// requests and errors per second and measures the utilization it reports:
// ten buckets of 100 ms, as package loadreport's middleware cuts its
// window (loadreport.WithWindow(ReportWindow)). It is short because the
// fleet scenarios redraw speeds about every second.
const ReportWindow = time.Second

// reportBuckets is how many buckets ReportWindow is cut into, as the
// middleware's.
const reportBuckets = 10

// reportWidth is the width of one bucket, in nanoseconds.
const reportWidth = int64(ReportWindow) / reportBuckets

// window sums a quantity per bucket of reportWidth over the last
// reportBuckets buckets, as the middleware's rateWindow counts: slot k%10
// holds bucket k's sum while k is among the last ten.
type window struct {
	idx [reportBuckets]int64
	sum [reportBuckets]int64
}

// add adds v to the bucket holding t; a bucket already out of the window
// is dropped.
func (w *window) add(t, v int64) {
	j := t / reportWidth
	k := j % reportBuckets
	switch {
	case w.idx[k] == j:
		w.sum[k] += v
	case w.idx[k] < j:
		w.idx[k], w.sum[k] = j, v
	}
}

// total returns the sum over the bucket holding now and the nine before
// it.
func (w *window) total(now int64) int64 {
	cur := now / reportWidth
	var n int64
	for j := max(cur-reportBuckets+1, 0); j <= cur; j++ {
		if k := j % reportBuckets; w.idx[k] == j {
			n += w.sum[k]
		}
	}
	return n
}

// reportSpan returns, in nanoseconds, the time total covers at now, as the
// middleware's rate divides by: the nine full buckets before the current
// one and the elapsed part of the current one, at most now itself, at
// least one bucket.
func reportSpan(now int64) int64 {
	cur := now / reportWidth
	s := (reportBuckets-1)*reportWidth + now - cur*reportWidth
	return max(min(s, now), reportWidth)
}

// server is what a backend running the middleware knows of itself.
type server struct {
	// late holds the attempts the clients gave up on (timed out): the
	// server does not know the client left, so they stay in flight and
	// count as requests when they end.
	late []lateJob
	reqs window // requests ended, per bucket
	errs window // of which errors
	idle window // worker-nanoseconds idle, per bucket
	lat  window // the ended requests' durations on the server, ns, per bucket
	// byLevel keeps the latencies a probe is answered with; nil unless
	// the run's policy probes.
	byLevel *latencyByLevel
}

// lateJob is an attempt its client gave up on: it reached the server at
// from, finding rif others in flight, and ends there at end.
type lateJob struct{ from, end, rif int64 }

// ended counts a job that reached the server at from, finding rif others
// in flight, and ended at end: among the requests (and the errors, if
// failed) and the latencies of the windows.
func (s *server) ended(from, end, rif int64, failed bool) {
	s.reqs.add(end, 1)
	if failed {
		s.errs.add(end, 1)
	}
	s.lat.add(end, end-from)
	if s.byLevel != nil {
		s.byLevel.add(end, rif, end-from)
	}
}

// idleUntil records that a worker free since from took a job at now:
// its idle time [from, now) goes to the buckets it covers, but for the
// part already out of the window.
func (s *server) idleUntil(from, now int64) {
	from = max(from, (now/reportWidth-reportBuckets+1)*reportWidth)
	for from < now {
		end := min((from/reportWidth+1)*reportWidth, now)
		s.idle.add(from, end-from)
		from = end
	}
}

// settle counts the late attempts that have ended by now.
func (s *server) settle(now int64) {
	for i := 0; i < len(s.late); {
		if j := s.late[i]; j.end <= now {
			s.ended(j.from, j.end, j.rif, false)
			last := len(s.late) - 1
			s.late[i] = s.late[last]
			s.late = s.late[:last]
			continue
		}
		i++
	}
}

// fill writes into l the report backend b sends with a reply at now,
// before the reply itself is counted, as the middleware writes its header
// before the handler returns:
//   - InFlight: every attempt the backend holds, from every client,
//     queued or in service, the replying one included (so at least 1),
//     and the ones whose client gave up;
//   - RPS and EPS: the requests and the errors (fast errors, stalls)
//     that ended over the window, divided by its span as the middleware
//     divides;
//   - Utilization: the fraction of worker time busy over the same span
//     (within the first bucket, over the time since the start),
//     1 − idle / (workers × span), counting the idle time of workers idle
//     now up to now; 0 (absent) for a backend with unlimited workers.
func (b *backendState) fill(l *balancer.ServerLoad, now int64) {
	s := &b.srv
	inFlight, workers := b.serverView(now)
	sp := reportSpan(now)
	*l = balancer.ServerLoad{
		RPS:         float64(s.reqs.total(now)) * float64(time.Second) / float64(sp),
		EPS:         float64(s.errs.total(now)) * float64(time.Second) / float64(sp),
		InFlight:    float64(inFlight),
		HasInFlight: true,
	}
	if c := len(workers); c > 0 && now > 0 {
		// The span, but for the time before the run (in the first
		// bucket): the busy fraction of the time there was.
		covered := min(sp, now)
		idle := s.idle.total(now)
		for _, free := range workers {
			if free < now {
				idle += now - max(free, now-covered)
			}
		}
		u := 1 - float64(idle)/(float64(c)*float64(covered))
		l.Utilization = min(max(u, 0), 1)
	}
	b.lieReport(l)
}

// serverView returns what the server knows of itself at now: the jobs it
// holds (queued or in service, the ones whose client gave up included)
// and when each of its workers frees. Across the network (far) the jobs
// still on their way to it are not yet its own.
func (b *backendState) serverView(now int64) (inFlight int, workers []int64) {
	if b.hq != nil {
		return int(b.arrived), b.workers // the server's own queue
	}
	if b.far() {
		return int(b.arrived), b.seen
	}
	b.srv.settle(now)
	return int(b.rif) + len(b.srv.late), b.workers
}

// latency returns the server's latency estimate at now for a job finding
// rif others in flight, as package loadreport's Tracker answers a probe:
// by RIF level (latencyByLevel) where a level up to rif's holds jobs of
// the last second, else the mean duration on the server, from arrival to
// end, of the requests ended over ReportWindow (the Tracker's
// LatencyMs); 0 if none did.
func (b *backendState) latency(now, rif int64) time.Duration {
	b.serverView(now) // counts the late jobs ended by now
	if l := b.srv.byLevel; l != nil {
		if d, ok := l.estimate(now, rif); ok {
			return d
		}
	}
	return b.latencyWindowMean(now)
}

// latencyWindowMean returns the mean duration on the server of the
// requests ended over ReportWindow, 0 if none did.
func (b *backendState) latencyWindowMean(now int64) time.Duration {
	n := b.srv.reqs.total(now)
	if n == 0 {
		return 0
	}
	return time.Duration(b.srv.lat.total(now) / n)
}
