package sim

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

const ms = int64(time.Millisecond)

// TestServerReportByHand sets a backend's state by hand and checks each
// field of its report against numbers worked out here.
func TestServerReportByHand(t *testing.T) {
	var l balancer.ServerLoad

	// One worker, idle from 0 to 250 ms, then busy until 1.3 s; one
	// attempt in flight.
	b := backendState{workers: []int64{1300 * ms}, rif: 1}
	b.srv.idleUntil(0, 250*ms)
	b.fill(&l, 900*ms)
	// At 0.9 s the window spans the whole 0.9 s: 250 ms of it idle.
	assert.Equal(t, balancer.ServerLoad{InFlight: 1, HasInFlight: true, Utilization: 1 - 250.0/900}, l)

	// A request ends at 950 ms. At 1.25 s the window is buckets 3 to 12:
	// 900 ms of full buckets and 50 ms of the current one; the idle time
	// of buckets 0 to 2 has left it.
	b.srv.reqs.add(950*ms, 1)
	b.fill(&l, 1250*ms)
	assert.Equal(t, balancer.ServerLoad{InFlight: 1, HasInFlight: true, Utilization: 1, RPS: 1 / 0.95}, l)

	// A second worker idle since 1 s: 250 ms idle of 2 × 950 ms. Two
	// attempts the clients gave up on, one ended at 1.1 s (a request of
	// the window now), one still served until 1.4 s (in flight); an error
	// at 1.2 s.
	b.workers = append(b.workers, 1000*ms)
	b.srv.late = []lateJob{{800 * ms, 1100 * ms, 0}, {900 * ms, 1400 * ms, 0}}
	b.srv.reqs.add(1200*ms, 1)
	b.srv.errs.add(1200*ms, 1)
	b.fill(&l, 1250*ms)
	assert.Equal(t, 1400*ms, b.srv.late[0].end)
	assert.Len(t, b.srv.late, 1)
	assert.Equal(t, 2.0, l.InFlight)
	assert.InDelta(t, 3/0.95, l.RPS, 1e-12)
	assert.InDelta(t, 1/0.95, l.EPS, 1e-12)
	assert.InDelta(t, 1-0.25/1.9, l.Utilization, 1e-12)

	// In the first bucket the span is one bucket, as the middleware's.
	var first backendState
	first.srv.reqs.add(10*ms, 1)
	first.rif = 1
	first.fill(&l, 50*ms)
	assert.Equal(t, balancer.ServerLoad{InFlight: 1, HasInFlight: true, RPS: 10}, l, "unlimited workers: no utilization")
	// With one worker idle from 0 to 20 ms, busy since: 30 of the 50 ms.
	first.workers = []int64{70 * ms}
	first.srv.idleUntil(0, 20*ms)
	first.fill(&l, 50*ms)
	assert.InDelta(t, 0.6, l.Utilization, 1e-12)
}

// TestServerReportAllocs: a report allocates nothing.
func TestServerReportAllocs(t *testing.T) {
	b := backendState{workers: []int64{0, 5 * ms}, rif: 2}
	b.srv.late = make([]lateJob, 0, 4)
	var l balancer.ServerLoad
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += 3 * ms
		b.srv.idleUntil(b.workers[0], now)
		b.workers[0] = now + ms
		b.srv.late = append(b.srv.late, lateJob{now, now + 2*ms, 0})
		b.srv.reqs.add(now, 1)
		b.fill(&l, now)
	})
	assert.Zero(t, allocs)
}

// logPicker sends every attempt to its one peer and logs what it sees,
// for every client of a run into one log.
type logPicker struct {
	peer *balancer.Peer
	now  func() time.Time
	log  *replyLog
}

type replyLog struct {
	sends   []int64
	replies []loggedReply
}

type loggedReply struct {
	at, sent int64
	failed   bool
	load     *balancer.ServerLoad // a copy; nil when the reply carried none
}

func (p *logPicker) at() int64 { return int64(p.now().Sub(epoch)) }

func (p *logPicker) Pick(*balancer.Request) (*balancer.Peer, error) {
	p.log.sends = append(p.log.sends, p.at())
	return p.peer, nil
}

func (p *logPicker) Done(_ *balancer.Peer, o balancer.Outcome) error {
	r := loggedReply{at: p.at(), sent: p.at() - int64(o.Latency), failed: o.Failed}
	if o.Load != nil {
		l := *o.Load
		r.load = &l
	}
	p.log.replies = append(p.log.replies, r)
	return nil
}

func logPolicy(log *replyLog) Policy {
	return Policy{Name: "log", New: func(peers []*balancer.Peer, now func() time.Time, _ rand.Source) (balancer.Picker, error) {
		return &logPicker{peer: peers[0], now: now, log: log}, nil
	}}
}

// TestServerReportDerived runs one backend of one worker with a constant
// 8 ms service time under three clients, 100 requests/s, a 30 ms timeout
// and no retry, and derives every reply and its report from the attempts'
// send times alone: first-come first-served, each job starts when it
// arrives or when the one before it ends; the client sees the end or gives
// up at 30 ms; the report counts every job the server holds (from any
// client, timed out or not, the replying one included), the jobs ended in
// the window before this one, and the busy time in the window.
func TestServerReportDerived(t *testing.T) {
	const service, timeout = 8 * ms, 30 * ms
	sc := single(Backend{Workers: 1, Mean: time.Duration(service), Dist: LogNormal}, 100, 5*time.Second)
	sc.Clients, sc.Timeout, sc.Tries = 3, time.Duration(timeout), 1
	var log replyLog
	res, err := Run(&sc, logPolicy(&log), 1)
	require.NoError(t, err)
	require.Greater(t, res.Requests, 400)

	type job struct{ send, start, end int64 }
	jobs := make([]job, len(log.sends))
	bySend := map[int64]int{}
	var free int64
	for i, s := range log.sends {
		start := max(s, free)
		free = start + service
		jobs[i] = job{s, start, free}
		bySend[s] = i
	}
	require.Len(t, log.replies, len(jobs), "one reply per attempt")

	var timedOut, reported int
	for _, r := range log.replies {
		i, ok := bySend[r.sent]
		require.True(t, ok, "a reply to an attempt never sent, at %d", r.sent)
		j := jobs[i]
		wantFailed := j.end > j.send+timeout
		require.Equal(t, wantFailed, r.failed, "attempt sent at %d", j.send)
		if wantFailed {
			timedOut++
			assert.Equal(t, j.send+timeout, r.at)
			assert.Nil(t, r.load, "a timeout carries no report")
			continue
		}
		require.Equal(t, j.end, r.at)
		require.NotNil(t, r.load, "a reply without a report")
		reported++
		now := r.at
		cur := now / reportWidth
		lo := max(cur-9, 0) * reportWidth
		sp := max(min(9*reportWidth+now-cur*reportWidth, now), reportWidth)
		covered := min(sp, now) // no time before the start
		var inFlight, ended int
		var busy int64
		for k, o := range jobs {
			if k == i || o.send <= now && o.end > now {
				inFlight++
			}
			if k != i && o.end >= lo && o.end <= now {
				ended++
			}
			busy += max(0, min(o.end, now)-max(o.start, now-covered))
		}
		assert.Equal(t, float64(inFlight), r.load.InFlight, "in flight at %d", now)
		assert.True(t, r.load.HasInFlight)
		assert.InDelta(t, float64(ended)/(float64(sp)/1e9), r.load.RPS, 1e-9, "rps at %d", now)
		assert.Zero(t, r.load.EPS)
		assert.InDelta(t, float64(busy)/float64(covered), r.load.Utilization, 1e-9, "utilization at %d", now)
	}
	// The test means something: some attempts timed out and stayed on
	// the server, and the queue held several at once.
	assert.Positive(t, timedOut)
	assert.Positive(t, reported)

	// Without reports the same run replies the same, with no report.
	sc.NoReports = true
	var quiet replyLog
	_, err = Run(&sc, logPolicy(&quiet), 1)
	require.NoError(t, err)
	require.Len(t, quiet.replies, len(log.replies))
	for k, r := range quiet.replies {
		assert.Nil(t, r.load)
		r.load = log.replies[k].load
		assert.Equal(t, log.replies[k], r)
	}
}

// TestServerReportFastErrors: a fast error is an answer, with a report
// that counts it among the errors; a stall is not.
func TestServerReportFastErrors(t *testing.T) {
	for _, mode := range []FaultMode{FastError, Stall} {
		sc := single(Backend{Workers: 1, Mean: time.Millisecond}, 50, 2*time.Second)
		sc.Backends[0].Faults = []Fault{{From: time.Second, To: time.Hour, Mode: mode, Prob: 1}}
		sc.Tries, sc.Timeout = 1, 100*time.Millisecond
		var log replyLog
		_, err := Run(&sc, logPolicy(&log), 2)
		require.NoError(t, err)
		var errs, eps int
		for _, r := range log.replies {
			if !r.failed {
				continue
			}
			errs++
			if mode == Stall {
				assert.Nil(t, r.load)
				continue
			}
			require.NotNil(t, r.load)
			if r.sent >= int64(2*time.Second)-int64(ReportWindow)/2 && r.load.EPS > 0 {
				eps++
			}
		}
		require.Positive(t, errs, "%v", mode)
		if mode == FastError {
			assert.Positive(t, eps, "fast errors never showed in eps")
		}
	}
}

// TestReportsChangeNoOldPicker: the pickers that ignore Outcome.Load run
// the same with and without reports, result for result, so the tables of
// the scenarios that existed before reports are unchanged.
func TestReportsChangeNoOldPicker(t *testing.T) {
	for _, name := range []string{"brownout", "blackhole-fast", "herd"} {
		sc := mustLookup(t, name)
		sc.Duration = 20 * time.Second
		quiet := sc
		quiet.NoReports = true
		for _, pol := range []string{"SmoothWRR", "LeastConn", "P2CPeakEWMA", "FastestFirst", "RandomTwo", OracleSED, OracleSplit} {
			a, err := Run(&sc, policy(t, pol), 1)
			require.NoError(t, err)
			b, err := Run(&quiet, policy(t, pol), 1)
			require.NoError(t, err)
			// %v, since NaN metrics are not equal to themselves.
			assert.True(t, fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b), "%s, %s: results differ", name, pol)
		}
	}
}

// TestReportsAllocateNothing: a run with reports allocates no more
// objects than the same run without, but for the few slices of timed-out
// attempts growing: nothing per reply.
func TestReportsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	sc := mustLookup(t, "fleet16")
	sc.Duration = 10 * time.Second
	quiet := sc
	quiet.NoReports = true
	mallocs := func(s *Scenario) uint64 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		r, err := Run(s, policy(t, "SmoothWRR"), 1)
		runtime.ReadMemStats(&b)
		require.NoError(t, err)
		require.Greater(t, r.Attempts, 3000)
		return b.Mallocs - a.Mallocs
	}
	on, off := mallocs(&sc), mallocs(&quiet)
	assert.LessOrEqual(t, on, off+100, "with reports %d allocations, without %d", on, off)
}
