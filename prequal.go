package balancer

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer/internal/defaults"
)

// Prequal in detail (Wydrowski et al., "Load is not what you should
// balance: Introducing Prequal", NSDI 2024). A request's first pick sends
// up to perPick probes (PrequalSettings.ProbesPerPick) through the Prober to peers drawn at
// random among
// the eligible ones, preferring those without an answer in the pool; the
// answers (Answer) fill the pool (prequal_pool.go), and the pick chooses
// from it by the hot-cold rule. What the plain reading of the paper lacks,
// and this adds:
//
//   - The round trip. A probe's latency is the server's estimate, which
//     says nothing of the network: a far zone would look as good as a
//     near one. A candidate's latency is the estimate plus this client's
//     smoothed round trip to the peer (RFC 6298's SRTT, gain 1/8, from
//     the probes' RoundTrip).
//   - The failure model. Eligibility is nginx's (down, max_conns, the
//     fail window, the request's tried set; eligibility.go), and a failed
//     attempt on a peer drops its answer and keeps its later ones out of
//     the pool, until an attempt on it succeeds, for fail_timeout after
//     the failure (readmittable): a server that fails fast answers probes
//     with 0 in flight and would otherwise look best and become a sink.
//     Past fail_timeout its answers compete again, and the attempt they
//     win is nginx's probe of the peer (take claims it once the peer has
//     max_fails failures), so it gets what nginx gives it, max_fails
//     attempts and then one a fail_timeout, and is readmitted by the first
//     success (balance sim -check: readmission 0.2 s after the fast
//     errors end in blackhole-fast, where keeping the answers out until a
//     success readmitted it never in the 15 s left, its peak EWMA holding
//     the failure penalty). With max_fails 0, nginx never takes a peer out
//     and its answers stay out until an attempt succeeds. Meanwhile it
//     competes by P2CPeakEWMA's rule, where its failure counts as
//     WithFailurePenalty.
//   - Peers that do not answer. After prequalProbeFails failed probes in a
//     row a peer is unprobed (a server without the probe handler): it is
//     probed at most once per maxAge, until an answer comes, and is
//     balanced by P2CPeakEWMA's rule, with its weight's share of the
//     picks (silentShare). In a pool that mixes both, a pick
//     draws a P2C pair among the unprobed peers and compares the winner's
//     expected latency, its peak-EWMA cost (latency estimate × (in flight
//     + 1), ns), with the pool candidate's (estimate + round trip, ns);
//     the lower takes the attempt.
//   - The fallback. With no Prober, or no usable answer in the pool (the
//     first picks, or every answer aged out or of an ineligible peer), the
//     pick is P2CPeakEWMA's, draw for draw.
//   - Weights. A peer's configured weight divides both its answer's count,
//     for the hot rule, and its expected latency, for the cold choice
//     (prequalWeights, prequal_pool.go), as P2CPeakEWMA's cost divides by
//     it.
//   - Replies as answers. A successful reply whose load report carries the
//     server's count (ServerLoad.InFlight, as loadreport's middleware
//     sends on every reply) is a fresh answer of its peer, one probe for
//     free (replied, prequal_peer.go): count R − 1 (the replied attempt
//     has left), latency the peer's last probe estimate scaled to that
//     count, within the same trust rules as a probe's. It closes most of
//     the gap to the best picker with one client and narrows it with
//     many: balance sim, seeds 1-3, p99 fleet1 130 to 116 ms (LeastConn
//     114), fleet16 196 to 177, fleet64 275 to 253, zones16 230 to 211,
//     zones1 195 to 189 (P2CPeakEWMA 196; its mean 49.8 to 48.7 against
//     49.4, where it was above).
//
// Rates. A request's first pick sends ⌊(k+1)·perPick⌋ − ⌊k·perPick⌋
// probes, k counting such picks, so a fractional rate is spread evenly and
// deterministically, and its retries send none (at most 3 probes a
// request, however many attempts it makes); a
// token bucket on the injected clock (GCRA: one atomic word, the
// theoretical arrival time) caps them at perSecond, with a burst of a
// hundredth of a second's worth (at least one: 100 probes at the default
// 10,000 a second, the burst of 1,000 a second with a tenth); a probe the
// bucket refuses is
// counted (ProbeStats.RateLimited), not queued. A pick removes one answer
// besides those it uses up, the oldest and the worst in turn, once per
// three answers taken since the last removal (the paper's 3 probes and 1
// removal a query, tied to the answers so that a pick whose probes the cap
// refused removes less: with the removal tied to the picks, one probe a
// pick left one answer in the pool, and each pick took a random peer).
//
// What the simulator taught (balance sim, seeds 1-3 unless said, p99 ms;
// the clairvoyant SED oracle is 88 in fleet16, 91 in fleet64; fleets of
// 10 M/M/1 servers whose speeds are redrawn every 0.25-1.75 s, probes
// answered with loadreport's latency by RIF level):
//
//   - The plain reading herds. With the answer's latency as the cold
//     answers' score, a pool of 16 and the quantile 0.6, fleet16 is at 348
//     and fleet64 at 615, no better than P2CPeakEWMA (349, 519); at 0.84,
//     372 and 787. Every client sees the same low latency at the server
//     that was fast over the last second and sends there.
//   - The local count must move the latency, not only the count. The
//     latency a server answers is its estimate at the count it answered
//     with, which on a server that serves one request at a time grows as
//     the count + 1; an answer used u times is scored at latency × (count
//     + u + 1)/(count + 1), so that the client's own attempts make the
//     server look slower at once. With it, and the quantile 0.3, fleet16
//     is at 207 and fleet64 at 295 (pool 16).
//   - A small pool. The pool then holds little more than the last pick's
//     three answers, the freshest, of three peers drawn at random, so that
//     the clients choose among different peers (a power of three choices)
//     instead of all among the same best: pool 4 gives 201 and 265, pool 16
//     207 and 295, pool 3 189 and 258 but loses 5-10% where one client
//     sends fast (jitter, fleet1). Over 6 seeds, pool 4: quantile 0.2 193.5
//     and 279.5, 0.3 195.8 and 264.8, 0.4 196.2 and 274.9.
//   - The reuse budget's cap (1, 2, 4 or 8) and the max age (100 ms to
//     1 s) change little. Two random answers, the better taken, in place
//     of the best, harm (fleet16 230 to 290 in runs before the simulator
//     answered by RIF level). A score that takes the latency for a window
//     mean, latency × (count + 1)/(smoothed count + 1), does as well (201,
//     258); the one kept follows ProbeAnswer's contract (the estimate at
//     the answered count) and needs no smoothed count.
//   - The per-second cap. At 1000 a second, a single client at 1,190
//     requests a second (hetero) probes 0.84 times a pick and loses to
//     P2CPeakEWMA (pool 4: 76 against 56); at 10,000 it is at 50.
//
// What limits it: the answers a pick chooses from are one of the client's
// own inter-request intervals old (43 ms mean with 16 clients, 170 ms with
// 64, two to nine mean service times), since a client probes at the rate
// it sends, and no rule over them reached the targets: with each answer's
// latency replaced by the exact one (current speed × (count + 1), in a
// modified simulator, not kept, before it answered by RIF level) fleet16
// was still at 177-190 and fleet64 at 240-270. The defaults, fed by the
// replies' reports, reach 2.0× the oracle with 16 clients and 2.8× with 64
// (176.8 and 252.7 ms against 87.9 and 90.6; TestPrequalDefault), against
// P2CPeakEWMA's 4.0× and 5.7×: above the 1.5× and 2× aimed at. A pool of 6
// helps one client (zones1 154 ms) but herds with 64 (fleet64 273), and 3
// the reverse (229 and 221); the hot quantile between 0.2 and 0.4 moves
// every fleet by under 5%.

// Prequal balances by asynchronous probes of the servers' requests in
// flight and latency (Wydrowski et al., NSDI 2024, in production at
// YouTube): each request sends a few probes through a [Prober]
// ([PrequalSettings.Prober]) and chooses among the recent answers, a small
// pool, by the hot-cold rule: an answer is hot when its in-flight count is
// above a quantile of the recently answered counts
// ([PrequalSettings.HotQuantile]); the cold
// answer of the lowest latency (the server's estimate plus this client's
// round trip to it) wins, or if all are hot the lowest count. A used
// answer counts the attempt in its in-flight count and serves a bounded
// number of picks; answers age out ([PrequalSettings.MaxAge]). Probes are
// bounded per request and per second ([PrequalSettings.ProbesPerPick],
// [PrequalSettings.ProbesPerSecond]). Choose it for many clients
// sharing servers that answer probes (loadreport's handler), where every
// client-side picker herds.
//
// A peer's weight divides its answer's count and expected latency, so a
// peer of weight 2 is two servers' worth. Every successful reply whose load
// report carries the server's requests in flight (Outcome.Load, as
// loadreport's middleware sends) is also a fresh answer of its peer.
//
// An answer counts for no less than this client sees: its in-flight count
// is raised to the client's own attempts on the peer and its latency to
// the fastest recent reply, and the answers of a peer whose replies keep
// coming slower than they imply count for the replies' smoothed latency
// until the two agree again (ProbeStats counts both).
//
// Failures follow nginx (max_fails, fail_timeout); a failed attempt keeps
// the peer's answers out of the pool for fail_timeout (with max_fails 0,
// until an attempt on it succeeds), so a server that fails fast, and
// answers probes as the least loaded, does not become a sink; a failure
// is what the caller reports as one (over HTTP, a status among the
// Transport's FailureStatuses). Peers that do not answer probes, and
// every peer without a Prober or before the first answers, are balanced
// as [P2CPeakEWMA] balances them ([WithDecay], default 10 s;
// [WithFailurePenalty]);
// those whose probes fail keep their weight's share of the picks.
//
// Pick is O(pool size) under one short lock (lock-free without a Prober),
// allocates nothing and never waits for a probe; Done is P2CPeakEWMA's
// and, for a reply whose report counts the server's requests in flight, a
// failure or the success after one, the pool's lock.
// Close stops the probing. The zero value is not
// usable; use [PrequalSettings.New]. It is safe for concurrent use.
type Prequal struct {
	twoChoices
	peakEWMA

	prober   Prober // nil: P2CPeakEWMA's picks
	perPick  float64
	maxAge   int64 // ns
	bucket   probeBucket
	picks    atomic.Uint64 // picks that sent probes, for the fractional rate
	unprobed atomic.Int64  // peers of the list balanced by P2CPeakEWMA's rule

	pool probePool

	closed  atomic.Bool
	sending atomic.Int64 // picks between their look at closed and their last Probe

	stats probeCounters
}

// prequalSpec is Prequal's declaration (see pickerSpec).
var prequalSpec = pickerSpec{
	name:     "Prequal",
	options:  []string{"WithRand", "WithDecay", "WithFailurePenalty", "WithProber", "WithProbeRate", "WithProbePool", "WithHotQuantile"},
	latency:  true,
	settings: "PrequalSettings",
}

// Bounds of Prequal's options. Below minProbesPerSecond (one probe in
// 1000 s) a probe's interval in ns would overflow the bucket's arithmetic.
const (
	minProbesPerSecond = 1e-3
	maxProbesPerPick   = 16
	maxProbePoolSize   = 1024
)

// prequalProbeFails is how many failed probes in a row make a peer
// unprobed.
const prequalProbeFails = 3

// PrequalSettings are Prequal's own settings; New builds a Prequal with
// them. The zero value of a field is its default, so PrequalSettings{} is
// every default: no Prober, and Prequal picks as P2CPeakEWMA. A value out
// of range is ErrInvalidConfig naming the field and the value.
type PrequalSettings struct {
	// Prober sends the probes; Prequal owns it from then on: Close closes
	// it if it is an io.Closer. nil: none, and Prequal picks as
	// P2CPeakEWMA.
	Prober Prober

	// ProbesPerPick is how many probes a request sends, on its first pick,
	// in [0, 16]; a fraction is spread evenly over the requests. 0: 3,
	// the paper's and prequal-rs's 3 a query, so none (the pool then fills
	// from the replies' reports alone) is written -1.
	ProbesPerPick float64

	// ProbesPerSecond caps the probes a second, at least 0.001; 0: 10000,
	// 3 a pick up to about 3,333 picks a second, fewer a pick above.
	ProbesPerSecond float64

	// PoolSize is how many answers the pool holds at most, in [1, 1024];
	// 0: 4 (the paper and prequal-rs keep 16, which herds more with many
	// clients, see Prequal in detail).
	PoolSize int

	// MaxAge is how old an answer may be, in (0, MaxProbeLatency]; an
	// answer whose round trip passed it is dropped as late. 0: 1 s.
	MaxAge time.Duration

	// HotQuantile is the quantile of the recently answered in-flight
	// counts above which an answer is hot, in (0, 1]; 0: 0.3, from the
	// simulator's runs (the paper takes 0.84, prequal-rs 0.6, which herded
	// in its simulation; see Prequal in detail).
	HotQuantile float64
}

// New returns a Prequal over peers with the settings s. opts: the shared
// options (see Option).
func (s PrequalSettings) New(peers []*Peer, opts ...Option) (*Prequal, error) {
	return NewPrequal(peers, append([]Option{s.Option()}, opts...)...)
}

// Option returns s as an Option, for a Prequal built by name
// (Algorithm.New), as balancerflag's flags and the gRPC configs build
// one: Prequal's constructors apply it where it stands among opts, and
// every other picker refuses it. Name the picker statically with New.
func (s PrequalSettings) Option() Option {
	return ownOption(prequalSpec.settings, func(c *prequalSettings) {
		const n = "PrequalSettings."
		if s.Prober != nil {
			c.prober = own[Prober]{s.Prober, n + "Prober"}
		}
		field(&c.perPick, n+"ProbesPerPick", s.ProbesPerPick, true)
		field(&c.perSecond, n+"ProbesPerSecond", s.ProbesPerSecond, false)
		field(&c.size, n+"PoolSize", s.PoolSize, false)
		field(&c.maxAge, n+"MaxAge", s.MaxAge, false)
		field(&c.q, n+"HotQuantile", s.HotQuantile, false)
	})
}

// prequalSettings are Prequal's own settings as given.
type prequalSettings struct {
	prober             own[Prober]
	perPick, perSecond own[float64]
	size               own[int]
	maxAge             own[time.Duration]
	q                  own[float64]
}

// WithProber sets PrequalSettings.Prober to p; WithProber(nil) is
// refused.
//
// Deprecated: use PrequalSettings.Prober.
func WithProber(p Prober) Option {
	return ownOption("WithProber", func(s *prequalSettings) {
		s.prober = own[Prober]{p, "WithProber"}
		if p == nil {
			s.prober.by = "WithProber(nil)"
		}
	})
}

// WithProbeRate sets PrequalSettings.ProbesPerPick to perPick (0: none)
// and ProbesPerSecond to perSecond.
//
// Deprecated: use PrequalSettings.ProbesPerPick (-1 for none) and
// PrequalSettings.ProbesPerSecond.
func WithProbeRate(perPick, perSecond float64) Option {
	return ownOption("WithProbeRate", func(s *prequalSettings) {
		by := fmt.Sprintf("WithProbeRate(%v, %v)", perPick, perSecond)
		s.perPick, s.perSecond = own[float64]{perPick, by}, own[float64]{perSecond, by}
	})
}

// WithProbePool sets PrequalSettings.PoolSize to size and MaxAge to
// maxAge.
//
// Deprecated: use PrequalSettings.PoolSize and PrequalSettings.MaxAge.
func WithProbePool(size int, maxAge time.Duration) Option {
	return ownOption("WithProbePool", func(s *prequalSettings) {
		by := fmt.Sprintf("WithProbePool(%v, %v)", size, maxAge)
		s.size, s.maxAge = own[int]{size, by}, own[time.Duration]{maxAge, by}
	})
}

// WithHotQuantile sets PrequalSettings.HotQuantile to q.
//
// Deprecated: use PrequalSettings.HotQuantile.
func WithHotQuantile(q float64) Option {
	return ownOption("WithHotQuantile", func(s *prequalSettings) { s.q.give("WithHotQuantile", q) })
}

// check returns an error naming the first setting out of range.
func (s prequalSettings) check() error {
	bad := func(by string, why string) error {
		return fmt.Errorf("balancer: Prequal: %s: %s: %w", by, why, ErrInvalidConfig)
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case s.prober.by != "" && s.prober.v == nil:
		return bad(s.prober.by, "nil")
	case !finite(s.perPick.v) || s.perPick.v < 0 || s.perPick.v > maxProbesPerPick:
		return bad(s.perPick.by, fmt.Sprintf("probes a pick %v out of [0, %d]", s.perPick.v, maxProbesPerPick))
	case !finite(s.perSecond.v) || s.perSecond.v < minProbesPerSecond:
		return bad(s.perSecond.by, fmt.Sprintf("probes a second %v not a finite number of at least %v", s.perSecond.v, minProbesPerSecond))
	case s.size.v < 1 || s.size.v > maxProbePoolSize:
		return bad(s.size.by, fmt.Sprintf("size %d out of [1, %d]", s.size.v, maxProbePoolSize))
	case s.maxAge.v <= 0 || s.maxAge.v > MaxProbeLatency:
		return bad(s.maxAge.by, fmt.Sprintf("max age %v out of (0, %v]", s.maxAge.v, MaxProbeLatency))
	case math.IsNaN(s.q.v) || s.q.v <= 0 || s.q.v > 1:
		return bad(s.q.by, "out of (0, 1]")
	}
	return nil
}

// NewPrequal returns a Prequal over peers with the default settings
// (PrequalSettings.New sets them), and so no Prober until one is set.
// opts: the shared options (see Option).
func NewPrequal(peers []*Peer, opts ...Option) (*Prequal, error) {
	cfg, err := newConfig(prequalSpec, opts)
	if err != nil {
		return nil, err
	}
	lat, err := latencyOptions(prequalSpec.name, &cfg, defaults.Decay)
	if err != nil {
		return nil, err
	}
	set := prequalSettings{
		perPick: own[float64]{v: defaults.ProbesPerPick}, perSecond: own[float64]{v: defaults.ProbesPerSecond},
		size: own[int]{v: defaults.ProbePoolSize}, maxAge: own[time.Duration]{v: defaults.ProbeMaxAge}, q: own[float64]{v: defaults.HotQuantile},
	}
	applyOwn(&cfg, &set)
	if err := set.check(); err != nil {
		return nil, err
	}
	b := &Prequal{
		peakEWMA: peakEWMA{tau: float64(lat.decay), penalty: float64(lat.penalty)},
		prober:   set.prober.v,
		perPick:  set.perPick.v,
		maxAge:   int64(set.maxAge.v),
		bucket:   newProbeBucket(set.perSecond.v),
		pool: probePool{
			e: make([]poolEntry, 0, set.size.v), size: set.size.v, maxAge: int64(set.maxAge.v), q: set.q.v,
			removes: set.perPick.v > 0,
		},
	}
	b.fresh = newPrequalPeer
	b.rng = newRandSource(cfg)
	if err := b.init(peers, cfg, b.changedLocked); err != nil {
		return nil, err
	}
	return b, nil
}

// changedLocked rebuilds the draw tables, then, under the pool's lock,
// drops the answers of peers no longer held, records each peer's place in
// its list, counts the unprobed peers and sets the reuse budget for the
// new number of peers. Requires the peer set's lock.
func (b *Prequal) changedLocked(l *peerList) {
	b.twoChoices.changedLocked(l)
	pl := &b.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for j := 0; j < len(pl.e); {
		if pl.e[j].peer.owner.Load() != &b.peerSet || pl.e[j].peer.state.Load() != &pl.e[j].st.peerState {
			pl.removeLocked(j)
			continue
		}
		j++
	}
	var n int64
	for _, list := range [2][]*Peer{l.primary, l.backup} {
		for i, p := range list {
			st := prequalOf(p)
			st.pos, st.backup = i, p.backup.Load()
			if st.unprobed.Load() {
				n++
			}
		}
	}
	b.unprobed.Store(n)
	pl.budget = reuseBudget(pl.size, len(l.primary), b.perPick, b.perPick/answersPerRemoval)
}

// Pick chooses by the hot-cold rule among the pool's answers for peers r
// may try, or, without one, as P2CPeakEWMA; then, on a request's first
// attempt, it sends the request's probes. It never waits for a probe.
func (b *Prequal) Pick(r *Request) (*Peer, error) {
	if b.prober == nil {
		return b.pick(r, &b.peakEWMA)
	}
	t := b.draw.Load()
	if t == nil {
		return nil, ErrNoPeers
	}
	clk := lazyClock{now: b.now}
	k := 0
	if r.fresh() { // a retry sends none: at most perPick probes a request
		k = b.probesThisPick()
	}
	p, err := pickFrame(t.list, r, func(peers []*Peer, backup bool) int {
		if backup {
			return b.choose(peers, &t.backup, backup, r, &clk)
		}
		return b.choose(peers, &t.primary, backup, r, &clk)
	})
	if k > 0 && !t.list.single {
		b.sendProbes(t, k, &clk)
	}
	return p, err
}

// Close stops the probing: no Probe call starts after it returns, and the
// pool is emptied, so that Pick goes on as P2CPeakEWMA. It closes the
// Prober if it is an io.Closer and returns its error; a second Close does
// nothing.
func (b *Prequal) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	for b.sending.Load() != 0 {
		runtime.Gosched() // a pick is between its look at closed and its last Probe
	}
	b.pool.mu.Lock()
	for len(b.pool.e) > 0 {
		b.pool.removeLocked(len(b.pool.e) - 1)
	}
	b.pool.mu.Unlock()
	if c, ok := b.prober.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

var _ ProbeReceiver = (*Prequal)(nil)
