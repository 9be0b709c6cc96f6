package balancer

import (
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hashBenchSizes are the peer counts of the hash and random pickers'
// benchmarks.
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

// hashBenchPeers returns n healthy peers of weight 1 (160 ring points
// each), so a ring of 10,000 peers holds 1.6 million points.
func hashBenchPeers(n int) []*Peer {
	peers := make([]*Peer, n)
	for i := range peers {
		peers[i] = NewPeer(fmt.Sprintf("10.%d.%d.%d:80", i/65536, i/256%256, i%256))
	}
	return peers
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
				p, err := bp.new(hashBenchPeers(n))
				require.NoError(b, err)
				var r Request
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					r.Reset()
					r.SetKey(keys[i&1023])
					r.SetAddr(addrs[i&1023])
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

// BenchmarkConsistentHashRing times building the ring (NewConsistentHash,
// which builds it once) and reports its size: points and bytes.
func BenchmarkConsistentHashRing(b *testing.B) {
	for _, n := range hashBenchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var c *ConsistentHash
			for b.Loop() {
				var err error
				if c, err = NewConsistentHash(hashBenchPeers(n)); err != nil {
					b.Fatal(err)
				}
			}
			g := c.ring
			bytes := 8*cap(g.points) + 4*cap(g.start) + 4*cap(g.members) + 4*cap(g.index)
			b.ReportMetric(float64(len(g.points)), "points")
			b.ReportMetric(float64(bytes), "ring-bytes")
		})
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
				peers := hashBenchPeers(n)
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
					r.SetAddr(addrs[i&1023])
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
