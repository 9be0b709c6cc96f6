package balancer

import (
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hash and random pickers fall back to smooth round robin, where a
// peer of weight 0 can be picked as in SmoothWRR; they promise no cycle.
var _ = declareTraits("Hash", fuzzTrait{zeroWeight: zwAny})

// The derivations below restate nginx 1.22.1's hash methods from the
// reference text, independently of the code under test: plain loops, the
// standard library's CRC-32, no helper shared with the code under test.

// refWalk walks w (0 <= w < the total weight) along the weights, as nginx's
// hash methods do: the first peer whose weight exceeds what is left of w.
func refWalk(weights []int, w int) int {
	p := 0
	for w >= weights[p] {
		w -= weights[p]
		p++
	}
	return p
}

// refTotal is the sum of the weights.
func refTotal(weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	return total
}

// refHashCandidates returns the peer index each of the first n iterations
// of nginx's `hash KEY` lands on: h = crc32([REHASH] KEY), hash += (h >> 16)
// & 0x7fff, then hash % total walked along the weights.
func refHashCandidates(key string, weights []int, n int) []int {
	total := refTotal(weights)
	var out []int
	var hash uint64
	for rehash := 0; rehash < n; rehash++ {
		text := key
		if rehash > 0 {
			text = strconv.Itoa(rehash) + key
		}
		hash += uint64(crc32.ChecksumIEEE([]byte(text))>>16) & 0x7fff
		out = append(out, refWalk(weights, int(hash%uint64(total))))
	}
	return out
}

func hkClock() Option { return newFakeClockAt(time.Unix(1_700_000_000, 0)).opt() }

// TestHash_derivedSequence checks Hash against the derivation for many
// keys, with some peers down and, per request, the first candidates failing
// so that the retries walk the key's sequence on.
func TestHash_derivedSequence(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		down    []int
		fail    int // attempts of each request reported failed before the success
	}{
		{"equal", []int{1, 1, 1, 1}, nil, 0},
		{"weighted", []int{5, 1, 3, 10, 2}, nil, 0},
		{"down peers", []int{5, 1, 3, 10, 2}, []int{3, 0}, 0},
		{"retries continue the sequence", []int{2, 2, 3, 1, 4, 1}, []int{2}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := numberedWeighted(tc.weights...)
			for _, i := range tc.down {
				Down()(peers[i])
			}
			for _, p := range peers {
				MaxFails(0)(p) // failures here must not take peers out
			}
			h, err := NewHash(peers, hkClock())
			require.NoError(t, err)
			var r Request
			for k := range 300 {
				key := "key-" + strconv.Itoa(k)
				// The derivation first: the peer of each attempt, the
				// first candidate not tried and not down, the request's
				// failed iterations (tries) counted across attempts.
				cands := refHashCandidates(key, tc.weights, 80)
				tried := map[int]bool{}
				var want []int
				next, tries := 0, 0
				for range tc.fail + 1 {
					for ; tries <= 20; next++ {
						if c := cands[next]; !tried[c] && !slices.Contains(tc.down, c) {
							want = append(want, c)
							tried[c] = true
							next++
							break
						}
						tries++
					}
				}
				if tries > 20 {
					continue // round robin: TestHash_twentyTries
				}
				r.Reset()
				r.SetKey(key)
				for attempt, w := range want {
					got, err := h.Pick(&r)
					require.NoError(t, err)
					require.Equal(t, peers[w], got, "key %q attempt %d", key, attempt)
					require.NoError(t, h.Done(got, Outcome{Failed: attempt < tc.fail}))
				}
			}
		})
	}
}

// TestHash_twentyTries finds, by the derivation, a key whose first 21
// candidates all land on a down peer: nginx then hands the request to
// smooth round robin, which with a and b at weight 1 and current weights 0
// picks a, the first on the tie, whatever the key's later candidates say.
// A retry stays in round robin: b.
func TestHash_twentyTries(t *testing.T) {
	weights := []int{1, 1, 400}
	key := ""
	for k := 0; k < 10000 && key == ""; k++ {
		cands := refHashCandidates("k"+strconv.Itoa(k), weights, 40)
		if !slices.ContainsFunc(cands[:21], func(c int) bool { return c != 2 }) &&
			slices.Index(cands, 1) >= 0 && slices.IndexFunc(cands, func(c int) bool { return c != 2 }) == slices.Index(cands, 1) {
			key = "k" + strconv.Itoa(k) // hashing on would give b
		}
	}
	require.NotEmpty(t, key, "no key in the search has 21 down candidates then b")
	peers := numberedWeighted(weights...)
	Down()(peers[2])
	h, err := NewHash(peers, hkClock())
	require.NoError(t, err)
	var r Request
	r.SetKey(key)
	p := mustPick(t, h, &r)
	assert.Equal(t, peers[0], p, "round robin after 20 tries")
	assert.EqualValues(t, 21, r.hs.tries)
	require.NoError(t, h.Done(p, Outcome{Failed: true}))
	assert.Equal(t, peers[1], mustPick(t, h, &r), "the retry stays in round robin")
}

// TestHashPickers_roundRobinWithoutKey: an empty key or a nil Request is
// nginx's empty-key case, smooth round robin: weights {2, 1} give a b a
// (a 2 > b 1, a gives back 3: -1; then b 2 > a 1; then a 3). A single peer
// is always taken, even failing (nginx's single-server rule).
func TestHashPickers_roundRobinWithoutKey(t *testing.T) {
	for _, mk := range []struct {
		name string
		new  func([]*Peer, ...Option) (Balancer, error)
	}{
		{"Hash", as(NewHash)},
		{"ConsistentHash", as(NewConsistentHash)},
	} {
		t.Run(mk.name, func(t *testing.T) {
			for _, nilReq := range []bool{true, false} {
				peers := numberedWeighted(2, 1)
				p, err := mk.new(peers, hkClock())
				require.NoError(t, err)
				var got []string
				for range 6 {
					var r *Request
					if !nilReq {
						r = &Request{}
					}
					peer := mustPick(t, p, r)
					got = append(got, peer.Addr())
					require.NoError(t, p.Done(peer, Outcome{}))
				}
				assert.Equal(t, []string{"p0", "p1", "p0", "p0", "p1", "p0"}, got, "nil request: %v", nilReq)
			}
		})
	}
}

// TestHashPickers_badInput: every bad value is an error wrapping the
// sentinel and naming the value, never a panic.
func TestHashPickers_badInput(t *testing.T) {
	ctors := map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
	}
	tests := []struct {
		name   string
		picker string // "" for all
		peers  func() []*Peer
		opts   []Option
		want   error
		names  string
	}{
		{"backup", "", func() []*Peer { return []*Peer{NewPeer("a"), NewPeer("spare", Backup())} }, nil, ErrInvalidConfig, `"spare"`},
		{"empty hash text", "", func() []*Peer { return []*Peer{NewPeer("a", HashText(""))} }, nil, ErrInvalidConfig, `"a"`},
		{"bound below 1", "ConsistentHash", func() []*Peer { return numberedWeighted(1) }, []Option{WithBoundedLoad(0.5)}, ErrInvalidConfig, "0.5"},
		{"bound NaN", "ConsistentHash", func() []*Peer { return numberedWeighted(1) }, []Option{WithBoundedLoad(math.NaN())}, ErrInvalidConfig, "NaN"},
		{"bound infinite", "ConsistentHash", func() []*Peer { return numberedWeighted(1) }, []Option{WithBoundedLoad(math.Inf(1))}, ErrInvalidConfig, "+Inf"},
		{"ring too large", "ConsistentHash", func() []*Peer { return numberedWeighted(MaxRingWeight, 1) }, nil, ErrInvalidConfig, strconv.Itoa(MaxRingWeight + 1)},
		{"bound on Hash", "Hash", func() []*Peer { return numberedWeighted(1) }, []Option{WithBoundedLoad(2)}, ErrInvalidConfig, "WithBoundedLoad"},
		{"bound on RandomTwo", "RandomTwo", func() []*Peer { return numberedWeighted(1) }, []Option{WithBoundedLoad(2)}, ErrInvalidConfig, "WithBoundedLoad"},
		{"bound on LeastConn", "LeastConn", func() []*Peer { return numberedWeighted(1) }, []Option{WithBoundedLoad(2)}, ErrInvalidConfig, "WithBoundedLoad"},
		{"rand on Hash", "Hash", func() []*Peer { return numberedWeighted(1) }, []Option{WithRand(hkSource(nil))}, ErrInvalidConfig, "WithRand"},
	}
	for _, tc := range tests {
		for name, mk := range ctors {
			if tc.picker == "LeastConn" && name == "Hash" {
				mk = as(NewLeastConn)
			} else if tc.picker != "" && tc.picker != name {
				continue
			}
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				p, err := mk(tc.peers(), tc.opts...)
				require.ErrorIs(t, err, tc.want)
				assert.Nil(t, p)
				assert.Contains(t, err.Error(), tc.names)
			})
		}
	}
	// Add refuses a backup too, and ConsistentHash a ring past the limit.
	h, err := NewHash(numberedWeighted(1))
	require.NoError(t, err)
	assert.ErrorIs(t, h.Add(NewPeer("b", Backup())), ErrInvalidConfig)
	c, err := NewConsistentHash(numberedWeighted(MaxRingWeight - 1))
	require.NoError(t, err)
	assert.ErrorIs(t, c.Add(NewPeer("big", Weight(2))), ErrInvalidConfig)
	assert.ErrorIs(t, c.SetWeight(c.Peers()[0], MaxRingWeight+1), ErrInvalidConfig)
	rt, err := NewRandomTwo(numberedWeighted(1))
	require.NoError(t, err)
	assert.ErrorIs(t, rt.Add(NewPeer("b", Backup())), ErrInvalidConfig)
}

// TestHashPickers_weightZero: a peer of weight 0 is never hashed or drawn
// to; with every weight 0 the pickers go to round robin, which picks the
// first eligible peer.
func TestHashPickers_weightZero(t *testing.T) {
	for name, mk := range map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
	} {
		t.Run(name, func(t *testing.T) {
			peers := numberedWeighted(0, 1, 1)
			p, err := mk(peers, hkClock())
			require.NoError(t, err)
			for k := range 200 {
				var r Request
				r.SetKey(strconv.Itoa(k))
				r.SetClientAddr(netip.AddrFrom4([4]byte{10, byte(k), byte(k), 1}))
				got := mustPick(t, p, &r)
				require.NotEqual(t, peers[0], got)
				require.NoError(t, p.Done(got, Outcome{}))
			}
			zero, err := mk(numberedWeighted(0, 0), hkClock())
			require.NoError(t, err)
			var r Request
			r.SetKey("x")
			assert.Equal(t, "p0", mustPick(t, zero, &r).Addr())
		})
	}
}

// TestHashPickers_concurrent runs picks, reports (some failures) and peer
// changes at once; under -race it checks the locking, and at the end every
// in-flight count is back to 0.
func TestHashPickers_concurrent(t *testing.T) {
	for name, mk := range map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
		"BoundedConsistentHash": func(ps []*Peer, o ...Option) (Balancer, error) {
			return NewConsistentHash(ps, append(o, WithBoundedLoad(1.25))...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			peers := numberedWeighted(1, 2, 3, 1, 2, 3, 1, 2)
			for _, p := range peers {
				FailTimeout(time.Millisecond)(p)
			}
			p, err := mk(peers)
			require.NoError(t, err)
			changer := p.(interface {
				SetDown(*Peer, bool) error
			})
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					var r Request
					for k := range 2000 {
						r.Reset()
						r.SetKey("k" + strconv.Itoa(k%97))
						r.SetClientAddr(netip.AddrFrom4([4]byte{10, byte(g), byte(k), 1}))
						attemptUpTo(t, p, &r, 3, k%11 == 0, nil)
					}
				})
			}
			wg.Go(func() {
				for k := range 200 {
					_ = changer.SetDown(peers[k%len(peers)], k%2 == 0)
				}
			})
			wg.Wait()
			for _, q := range peers {
				assert.Zero(t, q.InFlight(), q.Addr())
			}
		})
	}
}

// TestCRC32Decimal checks the REHASH digits' CRC against the standard
// library's over the formatted text.
func TestCRC32Decimal(t *testing.T) {
	for _, v := range []uint64{1, 9, 10, 19, 20, 99, 100, 12345, math.MaxUint64} {
		assert.Equal(t, crc32.ChecksumIEEE([]byte(strconv.FormatUint(v, 10))), crc32Decimal(v), "%d", v)
	}
}

// hashBenchSizes are the peer counts of the hash and random pickers'
// benchmarks, over addrPeers(n, 0): healthy peers of weight 1 (160 ring
// points each), so a ring of 10,000 peers holds 1.6 million points.
var hashBenchSizes = []int{10, 100, 1000, 10000}

// hashBenchPickers are the pickers of key.go's family, each with the
// options its benchmark runs with.
var hashBenchPickers = []struct {
	name string
	new  func([]*Peer) (Picker, error)
}{
	{"Hash", func(ps []*Peer) (Picker, error) { return NewHash(ps) }},
	{"ConsistentHash", func(ps []*Peer) (Picker, error) { return NewConsistentHash(ps) }},
	{"ConsistentHashBounded", func(ps []*Peer) (Picker, error) { return NewConsistentHash(ps, WithBoundedLoad(1.25)) }},
	{"IPHash", func(ps []*Peer) (Picker, error) { return NewIPHash(ps) }},
	{"Random", func(ps []*Peer) (Picker, error) { return NewRandom(ps) }},
	{"RandomTwo", func(ps []*Peer) (Picker, error) { return NewRandomTwo(ps) }},
}

// hashBenchKeys are the keys and client addresses the benchmarks cycle
// through, made up front so that the loop measures the pick.
func hashBenchKeys() ([]string, []netip.Addr) {
	keys := make([]string, 1024)
	addrs := make([]netip.Addr, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i*7919)
		addrs[i] = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
	}
	return keys, addrs
}

// BenchmarkHashPickers times Pick+Done for one request with its key (or
// address) set, the unit a caller pays for.
func BenchmarkHashPickers(b *testing.B) {
	keys, addrs := hashBenchKeys()
	for _, bp := range hashBenchPickers {
		for _, n := range hashBenchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				p, err := bp.new(addrPeers(n, 0))
				require.NoError(b, err)
				var r Request
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					r.Reset()
					r.SetKey(keys[i&1023])
					r.SetClientAddr(addrs[i&1023])
					i++
					peer, err := p.Pick(&r)
					if err != nil {
						b.Fatal(err)
					}
					if err := p.Done(peer, Outcome{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestHashPickers_zeroAllocs: Pick+Done, with the key and address set on a
// reused Request, and with a nil Request, allocates nothing at every
// benchmark size.
func TestHashPickers_zeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rings of up to 1.6 million points")
	}
	keys, addrs := hashBenchKeys()
	for _, bp := range hashBenchPickers {
		for _, n := range hashBenchSizes {
			t.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(t *testing.T) {
				peers := addrPeers(n, 0)
				for _, q := range peers {
					MaxFails(0)(q) // the failures below take no peer out
				}
				p, err := bp.new(peers)
				require.NoError(t, err)
				var r Request
				i := 0
				allocs := testing.AllocsPerRun(500, func() {
					r.Reset()
					r.SetKey(keys[i&1023])
					r.SetClientAddr(addrs[i&1023])
					i++
					peer, err := p.Pick(&r)
					if err == nil {
						err = p.Done(peer, Outcome{Failed: i%50 == 0})
					}
					if err != nil {
						t.Fatal(err)
					}
				})
				assert.Zero(t, allocs, "keyed Pick+Done")
				allocs = testing.AllocsPerRun(200, func() {
					peer, err := p.Pick(nil)
					if err == nil {
						err = p.Done(peer, Outcome{})
					}
					if err != nil {
						t.Fatal(err)
					}
				})
				assert.Zero(t, allocs, "Pick(nil)+Done")
			})
			runtime.GC() // the large rings
		}
	}
}

// The hash methods as nginx 1.22.1 runs them (ngx_http_upstream_hash_module.c
// and ngx_http_upstream_ip_hash_module.c, as hashing.md states them),
// transcribed on ngxModel: each is a selector for ngxModel.pickWith, with
// its per-request state, handing the attempt to ngxModel.getPeer (nginx's
// get_rr_peer over the same peers and weights) where nginx does. Nothing
// here is shared with the code under test.

// ngxHashReq is one request's state in the hash models: the key (or client
// address bytes), hp->hash, hp->rehash, hp->tries, and for the consistent
// method whether the ring position has been found.
type ngxHashReq struct {
	key    string
	addr   []byte
	hash   uint64
	rehash int
	tries  int
	begun  bool
}

// ngxFailed is nginx's fail window test.
func ngxFailed(p *ngxPeer, now int64) bool {
	return p.maxFails != 0 && p.fails >= p.maxFails && now-p.checked <= p.failTimeout
}

// ngxTook is nginx's step on a peer a hash method found: checked = now once
// the fail window has passed.
func ngxTook(p *ngxPeer, now int64) *ngxPeer {
	if now-p.checked > p.failTimeout {
		p.checked = now
	}
	return p
}

// hashPeer is ngx_http_upstream_get_hash_peer.
func (m *ngxModel) hashPeer(q *ngxHashReq) func([]*ngxPeer, int64) *ngxPeer {
	return func(peers []*ngxPeer, now int64) *ngxPeer {
		var total int64
		for _, p := range peers {
			total += p.w
		}
		if q.tries > 20 || q.key == "" || total == 0 {
			return m.getPeer(peers, now)
		}
		for {
			text := q.key
			if q.rehash > 0 {
				text = strconv.Itoa(q.rehash) + q.key
			}
			q.hash += uint64(crc32.ChecksumIEEE([]byte(text))>>16) & 0x7fff
			q.rehash++
			w := int64(q.hash % uint64(total))
			k := 0
			for w >= peers[k].w {
				w -= peers[k].w
				k++
			}
			if p := peers[k]; !m.tried[p] && !p.down && !ngxFailed(p, now) {
				return ngxTook(p, now)
			}
			if q.tries++; q.tries > 20 {
				return m.getPeer(peers, now)
			}
		}
	}
}

// TestHashPickers_fallbackAsModel drives Hash, ConsistentHash (with and
// without the load bound, which diverts nothing when each request ends
// before the next) and IPHash through the same random requests as the
// nginx models above: keys from a small pool and one in three empty (the
// round-robin fallback), client addresses, failures and their retries,
// retries after an attempt that did not fail, clock moves and peers going down and up (a list change, which restarts
// every current weight as an nginx reload does). Every pick must be the
// model's, and every peer's failures, effective and current weight too
// (State, which reads the current weights the cycle and the groups keep
// implicitly). Short lists run the plain scan and the cycle; from 16 peers
// the grouped scan; some ConsistentHash peers share a hash text, whose
// smooth step moves the weights the fallback shares.
func TestHashPickers_fallbackAsModel(t *testing.T) {
	methods := []string{"Hash", "ConsistentHash", "ConsistentHashBounded", "IPHash"}
	seeds := uint64(24)
	if underRace {
		// One goroutine on a fake clock: the race detector has nothing to
		// watch (24 s of the root package's -race run). 8 seeds keep the
		// short lists (even seeds) and the grouped scan (odd ones); the
		// plain run keeps all 24.
		seeds = 8
	}
	for seed := range seeds {
		for _, method := range methods {
			t.Run(fmt.Sprintf("%s/%d", method, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 17))
				clk := newFakeClock()
				n := 2 + rng.IntN(5)
				if seed%2 == 1 {
					n = groupedScanMin + rng.IntN(120)
				}
				distinct := 1 + rng.IntN(4)
				model := &ngxModel{}
				peers, byAddr := clusterOf(rng, model, n, 1<<30, 25, func() int { return 1 + rng.IntN(distinct) })
				text := map[*ngxPeer]string{}
				texts := make([]string, n)
				for i, m := range model.primary {
					texts[i] = m.addr
					if method != "IPHash" && method != "Hash" && i > 0 && rng.IntN(5) == 0 {
						texts[i] = texts[rng.IntN(i)]
						HashText(texts[i])(peers[i])
					}
					text[m] = texts[i]
				}
				weights := make([]int, n)
				for i, m := range model.primary {
					weights[i] = int(m.w)
				}
				ring := newRefRing(texts, weights)
				var p Balancer
				var err error
				switch method {
				case "Hash":
					p, err = NewHash(peers, clk.opt())
				case "ConsistentHash":
					p, err = NewConsistentHash(peers, clk.opt())
				case "ConsistentHashBounded":
					p, err = NewConsistentHash(peers, clk.opt(), WithBoundedLoad(1.25))
				case "IPHash":
					p, err = NewIPHash(peers, clk.opt())
				}
				require.NoError(t, err)
				pool := make([]string, 1+rng.IntN(8))
				for i := range pool {
					pool[i] = "k" + strconv.Itoa(rng.IntN(1000))
				}
				failProb := []float64{0, 0.01, 0.05, 0.3}[rng.IntN(4)]
				fallbacks, cycled, grouped := 0, 0, 0
				for step := range 400 {
					if rng.IntN(10) == 0 {
						clk.add(time.Duration(rng.IntN(3)) * time.Second)
					}
					if rng.IntN(60) == 0 {
						m := model.primary[rng.IntN(n)]
						m.down = !m.down
						for _, q := range model.primary {
							q.cw = 0 // a list change restarts the sequence
						}
						require.NoError(t, p.SetDown(byAddr[m.addr], m.down))
					}
					var r Request
					q := &ngxHashReq{}
					if rng.IntN(3) > 0 {
						q.key = pool[rng.IntN(len(pool))]
					}
					r.SetKey(q.key)
					a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), 1})
					r.SetClientAddr(a)
					q.addr = a.AsSlice()[:3]
					var sel func([]*ngxPeer, int64) *ngxPeer
					switch method {
					case "Hash":
						sel = model.hashPeer(q)
					case "IPHash":
						sel = model.ipHashPeer(q)
					default:
						sel = model.chashPeer(q, ring, text)
					}
					if q.key == "" && method != "IPHash" {
						fallbacks++
					}
					now := clk.now().UnixNano()
					if sr := smoothOf(p); sr != nil && sr.cycle.Load() != nil {
						cycled++
					} else if sr != nil && sr.groups != nil {
						grouped++
					}
					model.begin()
					for {
						want := model.pickWith(now, sel)
						got := pickAsModel(t, p, &r, want, model.exhausted(), step)
						if got == nil {
							break
						}
						failed := rng.Float64() < failProb
						model.free(want, failed, now)
						require.NoError(t, p.Done(got, Outcome{Failed: failed}))
						// A request may also go on after an attempt
						// that did not fail, as nginx's
						// proxy_next_upstream http_404 does.
						if !failed && rng.IntN(8) > 0 {
							break
						}
					}
					if step%10 != 0 {
						continue
					}
					for _, m := range model.all() {
						requireModelState(t, step, m, byAddr[m.addr].State())
					}
				}
				t.Logf("%d peers, weights 1..%d, failures %.2f: %d of 400 requests with no key; %d began with the cycle open, %d with the groups", n, distinct, failProb, fallbacks, cycled, grouped)
			})
		}
	}
}

// smoothOf returns the round-robin engine of a hash picker.
func smoothOf(p Balancer) *smoothRR {
	switch p := p.(type) {
	case *Hash:
		return &p.smoothRR
	case *ConsistentHash:
		return &p.smoothRR
	case *IPHash:
		return &p.smoothRR
	}
	return nil
}
