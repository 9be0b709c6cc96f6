package balancer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lbgo/balancer/internal/defaults"
)

// FuzzPickers runs one program of operations, decoded from the fuzz input,
// on every picker in pickerCases, and checks the shared contract after every
// step against a model of what each operation must do. The model knows the
// peer list, each peer's attempts in flight, nginx's failure accounting
// (fails, the fail window and the probe after it), each Request's tried
// set, bound and backup switch, so it knows which peers may take the next
// attempt; the checks are:
//
//   - Pick returns a peer the model finds eligible for that request (never a
//     down peer, a peer inside its fail window, a full peer, a peer the
//     request already tried, or a backup while a primary is eligible), or
//     exactly the sentinel the model expects: ErrNoPeers, ErrTriesExhausted,
//     or ErrNoLivePeer only when no peer is eligible. Never a nil peer with
//     a nil error.
//   - Done returns nil for every attempt Pick handed out, ErrInvalidLatency
//     for a negative latency, ErrNotInFlight or ErrUnknownPeer for a report
//     nothing is waiting for, and a rejected report changes nothing.
//   - Every peer's in-flight count equals the attempts not yet reported, so
//     it is back to 0 once all are; no count goes negative; the failure
//     count follows nginx's; 0 <= effective weight <= weight; Peers lists
//     the model's peers in the model's order.
//   - The per-picker promises in fuzzTraits: smooth current weights sum to
//     0 in each list after every step; while the primaries are healthy and
//     static, every W picks from a list change give each peer exactly its
//     weight (the round-robins: exactly one turn per n picks); weight-0
//     peers are skipped as each picker's doc says.
//
// Every Add, Remove, SetWeight, SetDown and Done, valid or not, is checked
// for its exact result. The program is decoded by fuzzMachine.run; the
// checked-in seeds in testdata/fuzz/FuzzPickers cover healthy cycles,
// failures and recovery, backups, retries, max_conns, updates in flight
// and bad reports.
func FuzzPickers(f *testing.F) {
	f.Fuzz(func(t *testing.T, prog []byte) {
		for _, pc := range slices.Concat(pickerCases, fuzzCases) {
			m := newFuzzMachine(t, pc, prog)
			if m != nil {
				m.run()
			}
		}
	})
}

// fuzzCases are pickers the fuzz model runs besides the registry's: one
// with other settings, registered from its test file with addFuzzCase.
var fuzzCases []pickerCase

func addFuzzCase(pc pickerCase) bool {
	fuzzCases = append(fuzzCases, pc)
	return true
}

// fuzzMaxSteps bounds one program, so each input runs in well under a
// millisecond per picker.
const fuzzMaxSteps = 300

// How a picker treats peers of weight 0, from each picker's doc.
const (
	// zwAny: weight 0 is a weight like any other; SmoothWRR's scan can
	// pick such a peer when others have run ahead (nginx does too), so
	// nothing is promised beyond the cycle counts.
	zwAny = iota
	// zwStatic: never picked while a peer of the same list has a positive
	// weight, whether or not that peer is eligible (RoundRobin's rotation,
	// RandomWeighted's table).
	zwStatic
	// zwEligible: never picked while an eligible peer of the same list has
	// a positive weight.
	zwEligible
)

// How a picker spreads picks while every primary is healthy.
const (
	cycleNone     = iota
	cycleWeights  // every W = Σweight picks give each peer its weight
	cycleRotation // every n picks give each rotation member one turn
	cyclePriority // none promised: every pick may go to one healthy peer, as a priority picker's do
)

// fuzzTrait is what a picker's doc promises beyond the shared contract.
type fuzzTrait struct {
	cycle      int
	zeroWeight int
	sumZero    bool // SmoothWRR: Σ current weights of each list is 0
	cwInRange  bool // ClassicWRR: 0 <= current weight <= weight
	// derived: the effective weight is bounded by the weight the picker
	// derives (PeerState.DerivedWeight), not the configured one
	// (ReportedWRR).
	derived bool

	// FastestFirst probes a peer whose weight no reply bears out one
	// attempt at a time (its doc, law 4): such a peer with an attempt in
	// flight is passed over while another peer of its list is eligible,
	// and is a single server's turn as ever. The model reads the flag
	// from the peer.
	exploreOne bool
	// FastestFirst takes a peer due for its probe (failures on record,
	// fail_timeout passed) before any other, whatever its weight.
	probeFirst bool
	// ConsistentHash bounds the total weight further (MaxRingWeight), and
	// checks that bound before any other check of Add.
	ringMax int64
}

// fuzzTraits holds the promises of each picker by its registry name, each
// registered from the picker's own test file with declareTraits. Every
// registered picker must declare its traits (TestFuzz_everyPickerHasTraits),
// even if it promises nothing beyond the contract.
var fuzzTraits = map[string]fuzzTrait{}

// declareTraits registers the fuzz traits of the picker called name.
func declareTraits(name string, tr fuzzTrait) bool {
	fuzzTraits[name] = tr
	return true
}

func TestFuzz_everyPickerHasTraits(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		_, ok := fuzzTraits[pc.name]
		assert.True(t, ok, "declare %s's fuzz traits in its test file with declareTraits", pc.name)
	})
}

// fzPeer is the model of one peer, next to the peer itself.
type fzPeer struct {
	p        *Peer
	weight   int64
	maxFails int64
	timeout  int64
	maxConns int64
	backup   bool
	down     bool
	badCfg   bool // NewPeer got an out-of-range weight
	held     bool // in the picker's list
	out      int64
	fails    int64
	checked  int64 // last failure or probe, unix ns
	accessed int64 // last failure, unix ns
}

// fzReq is the model of one Request.
type fzReq struct {
	r        Request
	attempts int
	limit    int
	gen      uint64
	backup   bool
	tried    map[*fzPeer]bool
}

func (q *fzReq) reset() {
	q.r.Reset()
	q.attempts, q.limit, q.gen, q.backup = 0, 0, 0, false
	clear(q.tried)
}

type fuzzMachine struct {
	t         *testing.T
	name      string
	noBackups bool // the picker refuses backup peers: the model makes none
	tr        fuzzTrait
	p         Picker
	set       updater
	in        []byte
	pos       int
	clk       *fakeClock
	gen       uint64
	pool      []*fzPeer // every peer made, in order
	byPtr     map[*Peer]*fzPeer
	list      []*fzPeer // the picker's peers in the order they were added
	out       []*fzPeer // one entry per attempt in flight
	reqs      [3]fzReq
	log       []string // the steps so far, for failure messages

	// The cycle check: clean while every non-down primary has been
	// healthy, static and unretried since the last list change.
	clean  bool
	w      int64 // picks per cycle
	k      int64 // picks since the last list change
	counts map[*fzPeer]int64
	share  map[*fzPeer]int64 // picks each peer gets per cycle
}

// fzWeight decodes a weight, mostly small, sometimes out of range or at
// the limit.
func fzWeight(b byte) int {
	switch b {
	case 255:
		return MaxWeightSum
	case 254:
		return -1
	case 253:
		return MaxWeightSum + 1
	}
	return int(b % 8)
}

func (m *fuzzMachine) next() byte {
	if m.pos >= len(m.in) {
		return 0
	}
	b := m.in[m.pos]
	m.pos++
	return b
}

// newPeer decodes four bytes into a new peer: address, weight, flags
// (max_fails, backup, down, max_conns) and fail_timeout.
func (m *fuzzMachine) newPeer(addr string) *fzPeer {
	w := fzWeight(m.next())
	flags := m.next()
	timeout := time.Duration(m.next()%6) * time.Second
	q := &fzPeer{
		weight:   int64(w),
		maxFails: int64(flags & 3),
		timeout:  int64(timeout),
		backup:   flags&4 != 0 && !m.noBackups,
		down:     flags&8 != 0,
		badCfg:   w < 0 || w > MaxWeightSum,
	}
	if mc := flags >> 4 & 7; mc >= 5 {
		q.maxConns = int64(mc - 4)
	}
	opts := []PeerOption{Weight(w), MaxFails(int(q.maxFails)), FailTimeout(timeout), MaxConns(int(q.maxConns))}
	if q.backup {
		opts = append(opts, Backup())
	}
	if q.down {
		opts = append(opts, Down())
	}
	q.p = NewPeer(addr, opts...)
	if q.badCfg {
		q.weight = defaults.Weight // what the peer holds; it is never added
	}
	m.pool = append(m.pool, q)
	m.byPtr[q.p] = q
	return q
}

func newFuzzMachine(t *testing.T, pc pickerCase, in []byte) *fuzzMachine {
	m := &fuzzMachine{
		t: t, name: pc.name, tr: fuzzTraits[pc.name], in: in, noBackups: pc.alg.NoBackups,
		clk:    newFakeClockAt(time.Unix(1_700_000_000, 0)),
		byPtr:  map[*Peer]*fzPeer{},
		counts: map[*fzPeer]int64{},
		share:  map[*fzPeer]int64{},
	}
	for i := range m.reqs {
		m.reqs[i].tried = map[*fzPeer]bool{}
	}
	seed := uint64(m.next())
	n := int(m.next() % 6)
	peers := make([]*Peer, 0, n)
	for i := range n {
		peers = append(peers, m.newPeer(fmt.Sprint("p", i)).p)
	}
	opts := []Option{m.clk.opt()}
	if _, err := pc.new(nil, WithRand(rand.NewPCG(1, 2))); err == nil {
		opts = append(opts, WithRand(rand.NewPCG(seed, 0x5eed)))
	}
	p, err := pc.new(peers, opts...)
	want := m.expectAdd(m.pool)
	if !errors.Is(err, want) || (err == nil) != (want == nil) {
		m.failf("New(%d peers) = %v, want %v", n, err, want)
		return nil
	}
	if err != nil {
		return nil
	}
	m.p, m.set = p, toSet(p)
	m.applyAdd(m.pool)
	m.check()
	return m
}

func (m *fuzzMachine) failf(format string, args ...any) {
	m.t.Helper()
	steps := m.log
	if len(steps) > 40 {
		steps = steps[len(steps)-40:]
	}
	m.t.Fatalf("%s, step %d: %s\nrecent steps:\n  %s", m.name, len(m.log), fmt.Sprintf(format, args...), strings.Join(steps, "\n  "))
}

func (m *fuzzMachine) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// run decodes and runs the program: one opcode byte per step, followed by
// its arguments.
func (m *fuzzMachine) run() {
	for step := 0; step < fuzzMaxSteps && m.pos < len(m.in); step++ {
		op, arg := m.next(), m.next()
		switch op % 13 {
		case 0:
			m.pick(-1, false)
		case 1:
			m.pick(int(arg%3), false) // the request's next attempt
		case 2:
			m.pick(int(arg%3), true) // a new request
		case 3, 4:
			if len(m.out) > 0 {
				m.report(int(arg)%len(m.out), op%13 == 4, m.latency(m.next()))
			}
		case 5:
			if len(m.pool) < 24 {
				m.add([]*fzPeer{m.newPeer(fmt.Sprint("p", arg%10))})
			}
		case 6:
			if q := m.poolPeer(arg); q != nil {
				m.add([]*fzPeer{q})
			}
		case 7:
			if q := m.poolPeer(arg); q != nil {
				m.remove(q)
			}
		case 8:
			if q, w := m.poolPeer(arg), fzWeight(m.next()); q != nil {
				m.setWeight(q, w)
			}
		case 9:
			if q, down := m.poolPeer(arg), m.next()&1 != 0; q != nil {
				m.setDown(q, down)
			}
		case 10:
			d := time.Duration(arg%16) * 500 * time.Millisecond
			if arg >= 240 {
				d = time.Duration(arg-239) * 10 * time.Second
			}
			m.clk.add(d)
			m.logf("clock +%v", d)
		case 11:
			m.badReport(int(arg))
		case 12:
			m.foreignReport()
		}
		m.check()
	}
	// Report everything still in flight: every count must be back at 0.
	for len(m.out) > 0 {
		m.report(0, false, time.Millisecond)
		m.check()
	}
}

// poolPeer returns a peer made so far, chosen by b, or nil if none was.
func (m *fuzzMachine) poolPeer(b byte) *fzPeer {
	if len(m.pool) == 0 {
		return nil
	}
	return m.pool[int(b)%len(m.pool)]
}

func (m *fuzzMachine) latency(b byte) time.Duration {
	if b == 255 {
		return math.MaxInt64
	}
	return time.Duration(b) * time.Millisecond
}

func (m *fuzzMachine) primaries() (p, b []*fzPeer) {
	for _, q := range m.list {
		if q.backup {
			b = append(b, q)
		} else {
			p = append(p, q)
		}
	}
	return p, b
}

func (m *fuzzMachine) single() bool {
	p, b := m.primaries()
	return len(p) == 1 && len(b) == 0
}

// failedAt is Peer.failed on the model.
func (q *fzPeer) failedAt(now int64) bool {
	return q.maxFails != 0 && q.fails >= q.maxFails && now-q.checked <= q.timeout
}

// eligible returns the peers of list that may take the next attempt of rq
// (nil: a request that is never retried).
func (m *fuzzMachine) eligible(list []*fzPeer, single bool, rq *fzReq) []*fzPeer {
	now := m.clk.now().UnixNano()
	positive := slices.ContainsFunc(list, func(q *fzPeer) bool { return q.weight > 0 })
	var e []*fzPeer
	for _, q := range list {
		switch {
		case q.down, q.maxConns != 0 && q.out >= q.maxConns:
		case !single && q.failedAt(now):
		case rq != nil && rq.tried[q]:
		case m.tr.zeroWeight == zwStatic && q.weight == 0 && positive:
		default:
			e = append(e, q)
		}
	}
	if m.tr.exploreOne && !single {
		idle := slices.DeleteFunc(slices.Clone(e), func(q *fzPeer) bool { return ffOf(q.p).exploring.Load() && q.out > 0 })
		if len(idle) > 0 {
			e = idle
		}
	}
	return e
}

// expectPick runs the model's half of a pick: the error Pick must return,
// or the peers it may return. It updates rq's bound, tried set and backup
// switch as the picker does before choosing.
func (m *fuzzMachine) expectPick(rq *fzReq) (error, []*fzPeer) {
	if len(m.list) == 0 {
		return ErrNoPeers, nil
	}
	if rq != nil {
		if rq.attempts == 0 {
			// A request with no attempt starts afresh, even if a
			// failed Pick moved it to the backups.
			rq.backup = false
			clear(rq.tried)
			rq.limit = 0
			for _, q := range m.list {
				if !q.down {
					rq.limit++
				}
			}
			rq.gen = m.gen
		} else {
			if rq.gen != m.gen {
				// The list changed: the tried bits no longer name
				// the same peers and are forgotten, and a request on
				// the backups of a list that has none left goes back
				// to the primaries.
				clear(rq.tried)
				rq.gen = m.gen
				if _, back := m.primaries(); len(back) == 0 {
					rq.backup = false
				}
			}
			if rq.attempts >= rq.limit {
				return ErrTriesExhausted, nil
			}
		}
	}
	prim, back := m.primaries()
	single := len(prim) == 1 && len(back) == 0
	onBackup := rq != nil && rq.backup
	var e []*fzPeer
	if !onBackup && single && rq != nil && rq.tried[prim[0]] {
		// The list shrank to one primary during the request, so the
		// bound set at its first attempt allows more attempts than there
		// are peers, and the one peer left has been tried. SmoothWRR,
		// ClassicWRR and P2CPeakEWMA give it again, their single-server
		// path (nginx's, where a single server gets one try) not looking
		// at the tried set; RoundRobin does not. The Request doc says
		// each peer is tried at most once; until the pickers agree,
		// either answer is accepted.
		if q := prim[0]; !q.down && (q.maxConns == 0 || q.out < q.maxConns) {
			return errEither, []*fzPeer{q}
		}
	}
	if !onBackup {
		e = m.eligible(prim, single, rq)
		if len(e) == 0 && len(back) > 0 {
			onBackup = true
			if rq != nil {
				rq.backup = true
				clear(rq.tried)
			}
		}
	}
	if onBackup {
		e = m.eligible(back, false, rq)
	}
	if len(e) == 0 {
		return ErrNoLivePeer, nil
	}
	return nil, e
}

// errEither is expectPick's answer when a peer of its list and
// ErrNoLivePeer are both accepted.
var errEither = errors.New("a peer or ErrNoLivePeer")

func (m *fuzzMachine) pick(slot int, fresh bool) {
	var r *Request
	var rq *fzReq
	what := "Pick(nil)"
	if slot >= 0 {
		rq = &m.reqs[slot]
		if fresh {
			rq.reset()
		}
		r = &rq.r
		what = fmt.Sprintf("Pick(req%d, attempt %d)", slot, rq.attempts+1)
	}
	retry := rq != nil && rq.attempts > 0
	want, e := m.expectPick(rq)
	got, err := m.p.Pick(r)
	m.logf("%s = %v, %v", what, got, err)
	switch {
	case got == nil && err == nil:
		m.failf("%s = nil, nil", what)
	case got != nil && err != nil:
		m.failf("%s = %v, %v: a peer and an error", what, got, err)
	case want == errEither:
		if err != nil && !errors.Is(err, ErrNoLivePeer) {
			m.failf("%s = %v; want %v or one of %v", what, err, ErrNoLivePeer, fzNames(e))
		}
	case want != nil:
		if !errors.Is(err, want) {
			m.failf("%s = %v, %v; want %v", what, got, err, want)
		}
	case err != nil:
		m.failf("%s = %v; want one of %v", what, err, fzNames(e))
	}
	if err != nil {
		m.clean = false
		return
	}
	q := m.byPtr[got]
	if q == nil || !slices.Contains(e, q) {
		m.failf("%s = %v; want one of %v (state: %s)", what, got, fzNames(e), m.describe())
	}
	if m.tr.zeroWeight == zwEligible && q.weight == 0 &&
		slices.ContainsFunc(e, func(o *fzPeer) bool { return o.weight > 0 }) {
		m.failf("%s = %v of weight 0 while an eligible peer has a weight (state: %s)", what, got, m.describe())
	}
	now := m.clk.now().UnixNano()
	q.out++
	if !m.single() && q.fails != 0 && now-q.checked > q.timeout {
		q.checked = now // the probe after the fail window
	}
	m.out = append(m.out, q)
	if rq != nil {
		rq.attempts++
		rq.tried[q] = true
	}
	m.countCycle(q, retry)
}

// countCycle checks the spread of picks while the state is clean.
func (m *fuzzMachine) countCycle(q *fzPeer, retry bool) {
	if !m.clean {
		return
	}
	if retry {
		m.clean = false // a retry moves the sequence off its period
		return
	}
	m.counts[q]++
	m.k++
	if m.k%m.w != 0 {
		return
	}
	for _, o := range m.list {
		if want := m.share[o] * (m.k / m.w); m.counts[o] != want {
			m.failf("after %d clean picks since the last list change, %v has %d picks, want %d (%d per %d): %s",
				m.k, o.p, m.counts[o], want, m.share[o], m.w, m.describeCounts())
		}
	}
}

// restartCycle runs after every list change: the smooth and classic
// sequences restart, and the cycle check restarts with them if every
// primary that is not down is healthy.
func (m *fuzzMachine) restartCycle() {
	m.clean, m.k, m.w = false, 0, 0
	clear(m.counts)
	clear(m.share)
	if m.tr.cycle == cycleNone {
		return
	}
	prim, _ := m.primaries()
	var ring []*fzPeer
	for _, q := range prim {
		if q.down {
			if m.tr.cycle == cycleRotation {
				return // a down peer's turn goes to the next peer: not one each
			}
			continue
		}
		st := q.p.State()
		if q.fails != 0 || q.maxConns != 0 || int64(st.EffectiveWeight) != q.weight {
			return
		}
		ring = append(ring, q)
	}
	switch m.tr.cycle {
	case cycleWeights:
		for _, q := range ring {
			m.share[q] = q.weight
			m.w += q.weight
		}
	case cycleRotation:
		positive := slices.ContainsFunc(ring, func(q *fzPeer) bool { return q.weight > 0 })
		for _, q := range ring {
			if q.weight > 0 || !positive {
				m.share[q] = 1
				m.w++
			}
		}
	}
	m.clean = m.w > 0
}

func (m *fuzzMachine) report(k int, failed bool, lat time.Duration) {
	q := m.out[k]
	o := Outcome{Failed: failed, Latency: lat}
	if lat%2 == 1 {
		// A server's report. The model checks no order that depends on it:
		// ReportedWRR's derived weights only bound its effective weights
		// (the derived trait), and no picker here has WithReportedLoad.
		o.Load = &ServerLoad{Utilization: float64(lat%7) / 4, RPS: float64(lat % 1000), InFlight: float64(lat % 5), HasInFlight: true}
	}
	err := m.p.Done(q.p, o)
	m.logf("Done(%v, failed=%v, %v, load %v) = %v", q.p, failed, lat, o.Load != nil, err)
	if err != nil {
		m.failf("Done(%v) of an attempt in flight = %v, want nil", q.p, err)
	}
	m.out = slices.Delete(m.out, k, k+1)
	q.out--
	if !q.held {
		return // removed while in flight: the report only ends the attempt
	}
	now := m.clk.now().UnixNano()
	switch {
	case m.single() && !q.backup:
		q.fails = 0 // nginx ignores max_fails for a single server
	case failed:
		q.fails++
		q.accessed, q.checked = now, now
		if !q.backup {
			m.clean = false
		}
	case q.accessed < q.checked:
		q.fails = 0 // a success after the probe
	}
}

// badReport reports on a peer with nothing in flight, or an attempt in
// flight with a negative latency or a load report holding a NaN or
// negative value; each is rejected and changes nothing.
func (m *fuzzMachine) badReport(arg int) {
	if arg&1 != 0 && arg&4 != 0 && len(m.out) > 0 {
		q := m.out[(arg>>3)%len(m.out)]
		l := ServerLoad{EPS: -1}
		if arg&8 != 0 {
			l = ServerLoad{Utilization: math.NaN()}
		}
		err := m.p.Done(q.p, Outcome{Failed: arg&2 != 0, Load: &l})
		m.logf("Done(%v, bad load %+v) = %v", q.p, l, err)
		if !errors.Is(err, ErrInvalidOutcome) {
			m.failf("Done(%v, load %+v) = %v, want %v", q.p, l, err, ErrInvalidOutcome)
		}
		return
	}
	if arg&1 != 0 && len(m.out) > 0 {
		q := m.out[(arg>>1)%len(m.out)]
		err := m.p.Done(q.p, Outcome{Latency: -time.Duration(arg + 1)})
		m.logf("Done(%v, negative latency) = %v", q.p, err)
		if !errors.Is(err, ErrInvalidLatency) {
			m.failf("Done(%v, latency %v) = %v, want %v", q.p, -time.Duration(arg+1), err, ErrInvalidLatency)
		}
		return
	}
	q := m.poolPeer(byte(arg >> 1))
	if q == nil || q.out != 0 {
		return
	}
	want := ErrUnknownPeer
	if q.held {
		want = ErrNotInFlight
	}
	err := m.p.Done(q.p, Outcome{Failed: arg&2 != 0})
	m.logf("Done(%v) with nothing in flight = %v", q.p, err)
	if !errors.Is(err, want) {
		m.failf("Done(%v) with nothing in flight = %v, want %v", q.p, err, want)
	}
}

func (m *fuzzMachine) foreignReport() {
	for _, p := range []*Peer{nil, NewPeer("foreign")} {
		if err := m.p.Done(p, Outcome{Failed: true}); !errors.Is(err, ErrUnknownPeer) {
			m.failf("Done(%v) of a peer never added = %v, want %v", p, err, ErrUnknownPeer)
		}
	}
	m.logf("Done(foreign)")
}

// expectAdd returns what Add(qs) must return, in Add's order of checks.
func (m *fuzzMachine) expectAdd(qs []*fzPeer) error {
	seen := map[*fzPeer]bool{} // one peer twice; addresses may repeat
	var sum int64
	for _, q := range m.list {
		sum += q.weight
	}
	if m.tr.ringMax != 0 {
		ring := sum
		for _, q := range qs {
			if !q.badCfg {
				ring += q.weight
			}
		}
		if ring > m.tr.ringMax {
			return ErrInvalidConfig
		}
	}
	for _, q := range qs {
		switch {
		case q.badCfg:
			return ErrInvalidConfig
		case q.held:
			return ErrPeerInUse
		case seen[q]:
			return ErrDuplicatePeer
		}
		seen[q] = true
	}
	for _, q := range qs {
		sum += q.weight
	}
	if sum > MaxWeightSum {
		return ErrInvalidConfig
	}
	return nil
}

func (m *fuzzMachine) applyAdd(qs []*fzPeer) {
	for _, q := range qs {
		q.held = true
		m.list = append(m.list, q)
	}
	m.gen++
	m.restartCycle()
}

func (m *fuzzMachine) add(qs []*fzPeer) {
	want := m.expectAdd(qs)
	err := m.set.Add(qs[0].p)
	m.logf("Add(%v w=%d mf=%d ft=%v mc=%d backup=%v down=%v) = %v", qs[0].p, qs[0].weight, qs[0].maxFails,
		time.Duration(qs[0].timeout), qs[0].maxConns, qs[0].backup, qs[0].down, err)
	if !errors.Is(err, want) || (err == nil) != (want == nil) {
		m.failf("Add(%v) = %v, want %v", qs[0].p, err, want)
	}
	if err == nil {
		m.applyAdd(qs)
	}
}

func (m *fuzzMachine) remove(q *fzPeer) {
	err := m.set.Remove(q.p)
	m.logf("Remove(%v) = %v", q.p, err)
	if !q.held {
		if !errors.Is(err, ErrUnknownPeer) {
			m.failf("Remove(%v) of a peer not held = %v, want %v", q.p, err, ErrUnknownPeer)
		}
		return
	}
	if err != nil {
		m.failf("Remove(%v) = %v, want nil", q.p, err)
	}
	q.held = false
	m.list = slices.DeleteFunc(m.list, func(o *fzPeer) bool { return o == q })
	m.gen++
	m.restartCycle()
}

func (m *fuzzMachine) setWeight(q *fzPeer, w int) {
	err := m.set.SetWeight(q.p, w)
	m.logf("SetWeight(%v, %d) = %v", q.p, w, err)
	var want error
	if !q.held {
		want = ErrUnknownPeer
	} else if w < 0 || w > MaxWeightSum {
		want = ErrInvalidConfig
	} else {
		sum := int64(w)
		for _, o := range m.list {
			if o != q {
				sum += o.weight
			}
		}
		if sum > MaxWeightSum || m.tr.ringMax != 0 && sum > m.tr.ringMax {
			want = ErrInvalidConfig
		}
	}
	if !errors.Is(err, want) || (err == nil) != (want == nil) {
		m.failf("SetWeight(%v, %d) = %v, want %v", q.p, w, err, want)
	}
	if err == nil {
		q.weight = int64(w)
		m.gen++
		m.restartCycle()
	}
}

func (m *fuzzMachine) setDown(q *fzPeer, down bool) {
	err := m.set.SetDown(q.p, down)
	m.logf("SetDown(%v, %v) = %v", q.p, down, err)
	if !q.held {
		if !errors.Is(err, ErrUnknownPeer) {
			m.failf("SetDown(%v) of a peer not held = %v, want %v", q.p, err, ErrUnknownPeer)
		}
		return
	}
	if err != nil {
		m.failf("SetDown(%v, %v) = %v, want nil", q.p, down, err)
	}
	q.down = down
	m.gen++
	m.restartCycle()
}

// check compares the picker with the model after a step.
func (m *fuzzMachine) check() {
	m.t.Helper()
	prim, back := m.primaries()
	want := append(slices.Clone(prim), back...)
	got := m.set.Peers()
	if len(got) != len(want) || !slices.EqualFunc(got, want, func(p *Peer, q *fzPeer) bool { return p == q.p }) {
		m.failf("Peers() = %v, want %v", got, fzNames(want))
	}
	for _, q := range m.pool {
		st := q.p.State()
		switch {
		case int64(st.InFlight) != q.out || int64(q.p.InFlight()) != q.out:
			m.failf("%v: %d in flight, want %d", q.p, st.InFlight, q.out)
		case q.out < 0:
			m.failf("%v: model in flight %d", q.p, q.out)
		case int64(st.Fails) != q.fails:
			m.failf("%v: fails %d, want %d (state: %s)", q.p, st.Fails, q.fails, m.describe())
		case st.Down != q.down:
			m.failf("%v: down %v, want %v", q.p, st.Down, q.down)
		case int64(st.Weight) != q.weight:
			m.failf("%v: weight %d, want %d", q.p, st.Weight, q.weight)
		case st.EffectiveWeight < 0 || st.EffectiveWeight > st.Weight && !m.tr.derived:
			m.failf("%v: effective weight %d outside [0, %d]", q.p, st.EffectiveWeight, st.Weight)
		case m.tr.derived && q.held && !q.down && st.EffectiveWeight > st.DerivedWeight:
			m.failf("%v: effective weight %d above the derived weight %d", q.p, st.EffectiveWeight, st.DerivedWeight)
		case m.tr.cwInRange && q.held && (st.CurrentWeight < 0 || st.CurrentWeight > st.Weight):
			m.failf("%v: current weight %d outside [0, %d]", q.p, st.CurrentWeight, st.Weight)
		}
	}
	if m.tr.sumZero {
		for _, l := range [][]*fzPeer{prim, back} {
			var sum int
			for _, q := range l {
				sum += q.p.State().CurrentWeight
			}
			if sum != 0 {
				m.failf("current weights of %v sum to %d, want 0: %s", fzNames(l), sum, m.describe())
			}
		}
	}
	for i := range m.reqs {
		rq := &m.reqs[i]
		if rq.r.Attempts() != rq.attempts {
			m.failf("req%d: Attempts() = %d, want %d", i, rq.r.Attempts(), rq.attempts)
		}
	}
}

func fzNames(qs []*fzPeer) []string {
	s := make([]string, len(qs))
	for i, q := range qs {
		s[i] = q.p.addr
	}
	return s
}

func (m *fuzzMachine) describe() string {
	var b strings.Builder
	now := m.clk.now().UnixNano()
	for _, q := range m.list {
		st := q.p.State()
		fmt.Fprintf(&b, "[%s w=%d ew=%d cw=%d fails=%d/%d out=%d/%d down=%v backup=%v failed=%v] ",
			q.p.addr, st.Weight, st.EffectiveWeight, st.CurrentWeight, q.fails, q.maxFails, q.out, q.maxConns,
			q.down, q.backup, q.failedAt(now))
	}
	return b.String()
}

func (m *fuzzMachine) describeCounts() string {
	var b strings.Builder
	for _, q := range m.list {
		fmt.Fprintf(&b, "%s:%d/%d ", q.p.addr, m.counts[q], m.share[q])
	}
	return b.String()
}
