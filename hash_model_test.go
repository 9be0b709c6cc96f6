package balancer

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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

// ipHashPeer is ngx_http_upstream_get_ip_hash_peer: the hash goes on from
// where the last iteration left it.
func (m *ngxModel) ipHashPeer(q *ngxHashReq) func([]*ngxPeer, int64) *ngxPeer {
	return func(peers []*ngxPeer, now int64) *ngxPeer {
		var total int64
		for _, p := range peers {
			total += p.w
		}
		if !q.begun {
			q.hash, q.begun = 89, true
		}
		if q.tries > 20 || total == 0 {
			return m.getPeer(peers, now)
		}
		for {
			for _, b := range q.addr {
				q.hash = (q.hash*113 + uint64(b)) % 6271
			}
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

// chashPeer is ngx_http_upstream_get_chash_peer over ring, whose points
// name peers by index: the smooth step among the eligible untried peers
// whose server text is the point's, else the next point, a try.
func (m *ngxModel) chashPeer(q *ngxHashReq, ring refRing, text map[*ngxPeer]string) func([]*ngxPeer, int64) *ngxPeer {
	return func(peers []*ngxPeer, now int64) *ngxPeer {
		if q.tries > 20 || q.key == "" || len(ring.hash) == 0 {
			return m.getPeer(peers, now)
		}
		if !q.begun {
			h := crc32.ChecksumIEEE([]byte(q.key))
			q.hash = uint64(sort.Search(len(ring.hash), func(k int) bool { return ring.hash[k] >= h }))
			q.begun = true
		}
		for {
			server := text[peers[ring.server[q.hash%uint64(len(ring.hash))]]]
			var best *ngxPeer
			var total int64
			for _, p := range peers {
				if text[p] != server || m.tried[p] || p.down || ngxFailed(p, now) {
					continue
				}
				p.cw += p.ew
				total += p.ew
				if p.ew < p.w {
					p.ew++
				}
				if best == nil || p.cw > best.cw {
					best = p
				}
			}
			if best != nil {
				best.cw -= total
				return ngxTook(best, now)
			}
			q.hash++
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
// the grouped scan; some ConsistentHash peers share a hash key, whose
// smooth step moves the weights the fallback shares.
func TestHashPickers_fallbackAsModel(t *testing.T) {
	methods := []string{"Hash", "ConsistentHash", "ConsistentHashBounded", "IPHash"}
	for seed := range uint64(24) {
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
						HashKey(texts[i])(peers[i])
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
					p, err = NewHash(peers, WithClock(clk.now))
				case "ConsistentHash":
					p, err = NewConsistentHash(peers, WithClock(clk.now))
				case "ConsistentHashBounded":
					p, err = NewConsistentHash(peers, WithClock(clk.now), WithBoundedLoad(1.25))
				case "IPHash":
					p, err = NewIPHash(peers, WithClock(clk.now))
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
					r.SetAddr(a)
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
					now := clk.t.UnixNano()
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
