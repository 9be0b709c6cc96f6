//go:build unix

package balancer_test

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hash live test's size: each batch, served by one nginx process, holds
// liveHashDet configurations of the deterministic methods (hash, hash
// consistent and ip_hash in turn), compared trace for trace, and
// liveHashRand of the random ones (random and random two in turn), compared
// by their distributions.
const (
	liveHashBatches = 4
	liveHashDet     = 51
	liveHashRand    = 10
	liveRandN       = 400 // requests of a random configuration
	livePValue      = 0.001
)

// liveDeterministic are the methods whose every pick nginx and the library
// must agree on; liveRandom those whose draws come from different random
// sources, compared by proportions.
var (
	liveDeterministic = []string{"hash $arg_k", "hash $arg_k consistent", "ip_hash"}
	liveRandom        = []string{"random", "random two"}
)

// TestNginxLiveHash runs random upstream configurations with nginx's hash,
// hash consistent, ip_hash, random and random two methods on a real nginx,
// with random keys ($arg_k) and client addresses (each request sent from
// its own 127.x.y.z), and checks that the library's picker for the method,
// driven by upstream.TraceEach, tries the same servers in the same order
// for every request of the deterministic methods. For random and random
// two, whose draws nginx takes from its own generator, it checks that the
// library's traces are distributed as nginx's: a chi-square test of
// homogeneity per configuration, summed over the configurations of each
// method, must give p > 0.001.
func TestNginxLiveHash(t *testing.T) {
	l := liveNginx(t)
	l.drawSeed()
	start := time.Now()
	ran := map[string]int{}
	repeated := 0
	chi := map[string]*chiSum{}
	for _, m := range liveRandom {
		chi[m] = &chiSum{minP: 1}
	}
	l.batches(liveHashBatches, liveHashDet+liveHashRand,
		func(rng *rand.Rand, k int) liveCase {
			if k < liveHashDet {
				return randomHashCase(rng, liveDeterministic[k%len(liveDeterministic)])
			}
			return randomRandCase(rng, liveRandom[(k-liveHashDet)%len(liveRandom)])
		},
		func(id int, r liveResult, c liveCase, got []string) {
			ran[c.method]++
			if c.repeats() {
				repeated++
			}
			if s := chi[c.method]; s != nil {
				s.add(homogeneity(r.letterTrace(r.trace), r.letterTrace(got)))
				return
			}
			l.compare(id, r, c, got)
		})
	l.reportHidden()
	for _, m := range liveRandom {
		s := chi[m]
		p := chiSquareQ(s.x, s.df)
		t.Logf("%s: chi-square %.1f on %d degrees of freedom over %d configurations of %d requests: p = %.3g (smallest p of one configuration %.3g)",
			m, s.x, s.df, ran[m], liveRandN, p, s.minP)
		assert.Greater(t, p, livePValue, "%s: the library's traces are not distributed as nginx's (seed %d)", m, l.seed)
	}
	total := 0
	for _, n := range ran {
		total += n
	}
	t.Logf("%d configurations (%d repeating an address) on live nginx in %v (%v), %d mismatches",
		total, repeated, time.Since(start).Round(time.Millisecond), ran, l.mismatches)
}

// randomHashCase draws one configuration of a deterministic method: 1 to 6
// servers (rarely 1), weights 1..10, max_fails 0..3, fail_timeout of at
// least 10s, some down and dead servers (no backup: nginx refuses it with
// these methods), 20 to 40 requests, and for each request a key (hash) or
// a client address (ip_hash).
func randomHashCase(r *rand.Rand, method string) liveCase {
	c := randomServers(r, 6, 10, hashTimeouts, false)
	c.method = method
	c.n = 20 + r.IntN(21)
	if method == "ip_hash" {
		c.clients = randomClients(r, c.n)
	} else {
		c.keys = randomKeys(r, c.n)
	}
	return c
}

// randomRandCase draws one configuration of random or random two: 2 to 5
// servers, weights 1..5, with down and dead servers as above, and
// liveRandN requests.
func randomRandCase(r *rand.Rand, method string) liveCase {
	c := randomServers(r, 5, 5, hashTimeouts, false)
	for len(c.servers) < 2 {
		c = randomServers(r, 5, 5, hashTimeouts, false)
	}
	c.method = method
	c.n = liveRandN
	return c
}

// hashTimeouts are the fail_timeout values of the hash and random
// configurations.
var hashTimeouts = []string{"10s", "15s", "30s", "1m", "2m"}

// randomKeys draws n keys from a pool of 1 to 15 random alphanumeric keys,
// with an empty key (nginx's round-robin fallback) one time in ten.
func randomKeys(r *rand.Rand, n int) []string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	pool := make([]string, 1+r.IntN(15))
	for i := range pool {
		b := make([]byte, 1+r.IntN(11))
		for j := range b {
			b[j] = alnum[r.IntN(len(alnum))]
		}
		pool[i] = string(b)
	}
	keys := make([]string, n)
	for i := range keys {
		if r.IntN(10) > 0 {
			keys[i] = pool[r.IntN(len(pool))]
		}
	}
	return keys
}

// randomClients draws n client addresses from a pool of 2 to 10 loopback
// addresses in 1 to 4 /24 networks (ip_hash hashes the first three bytes,
// so addresses of one network must go to one server).
func randomClients(r *rand.Rand, n int) []netip.Addr {
	nets := make([][2]byte, 1+r.IntN(4))
	for i := range nets {
		nets[i] = [2]byte{byte(r.IntN(256)), byte(r.IntN(256))}
	}
	pool := make([]netip.Addr, 2+r.IntN(9))
	for i := range pool {
		nw := nets[r.IntN(len(nets))]
		pool[i] = netip.AddrFrom4([4]byte{127, nw[0], nw[1], byte(1 + r.IntN(254))})
	}
	clients := make([]netip.Addr, n)
	for i := range clients {
		clients[i] = pool[r.IntN(len(pool))]
	}
	return clients
}

// chiSum adds up independent chi-square statistics: their sum is
// chi-square distributed on the sum of their degrees of freedom.
type chiSum struct {
	x    float64
	df   int
	minP float64 // the smallest p of one term, for the log
}

func (s *chiSum) add(x float64, df int) {
	if df == 0 {
		return
	}
	s.x += x
	s.df += df
	s.minP = min(s.minP, chiSquareQ(x, df))
}

// homogeneity is Pearson's chi-square test of homogeneity of two samples
// of categories (here whole trace lines, such as "a" or "c, b"): the
// statistic Σ (O−E)²/E over both samples and every category, E the count
// the category would have in each sample if both came from one
// distribution (its total split in proportion to the sample sizes), and
// its degrees of freedom, one less than the categories. So that every E is
// at least 5, the rule of thumb for the chi-square approximation,
// categories whose total falls short of 10 (E = 5 for equal samples) are
// pooled, and a pool still short of 10 joins the smallest other category.
func homogeneity(a, b []string) (float64, int) {
	count := map[string][2]float64{}
	for _, s := range a {
		c := count[s]
		c[0]++
		count[s] = c
	}
	for _, s := range b {
		c := count[s]
		c[1]++
		count[s] = c
	}
	var cells [][2]float64
	var pool [2]float64
	for _, c := range count {
		if c[0]+c[1] < 10 {
			pool[0] += c[0]
			pool[1] += c[1]
			continue
		}
		cells = append(cells, c)
	}
	if pool[0]+pool[1] > 0 {
		if pool[0]+pool[1] >= 10 || len(cells) == 0 {
			cells = append(cells, pool)
		} else {
			i := 0
			for j, c := range cells {
				if c[0]+c[1] < cells[i][0]+cells[i][1] {
					i = j
				}
			}
			cells[i][0] += pool[0]
			cells[i][1] += pool[1]
		}
	}
	na, nb := float64(len(a)), float64(len(b))
	x := 0.0
	for _, c := range cells {
		t := c[0] + c[1]
		ea, eb := t*na/(na+nb), t*nb/(na+nb)
		x += (c[0]-ea)*(c[0]-ea)/ea + (c[1]-eb)*(c[1]-eb)/eb
	}
	return x, max(len(cells)-1, 0)
}

// chiSquareQ is the chi-square distribution's upper tail, P(X ≥ x) on df
// degrees of freedom: the regularized upper incomplete gamma function
// Q(df/2, x/2), in closed form for whole and half-whole a = df/2, with
// each term in logarithms so that no power or factorial overflows:
//
//	Q(n, y)     = e^−y Σ_{j=0}^{n−1} y^j / j!
//	Q(n+½, y)   = erfc(√y) + e^−y Σ_{j=0}^{n−1} y^{j+½} / Γ(j+3/2)
func chiSquareQ(x float64, df int) float64 {
	if df <= 0 {
		return 1
	}
	if x <= 0 {
		return 1
	}
	y := x / 2
	sum := 0.0
	if df%2 == 0 {
		for j := range df / 2 {
			lg, _ := math.Lgamma(float64(j) + 1)
			sum += math.Exp(-y + float64(j)*math.Log(y) - lg)
		}
		return min(sum, 1)
	}
	sum = math.Erfc(math.Sqrt(y))
	for j := range (df - 1) / 2 {
		lg, _ := math.Lgamma(float64(j) + 1.5)
		sum += math.Exp(-y + (float64(j)+0.5)*math.Log(y) - lg)
	}
	return min(sum, 1)
}

// TestChiSquareQ checks the tail against the chi-square table's critical
// values (the x with P(X ≥ x) = p on df degrees of freedom, as printed in
// statistics tables to three decimals) and the exponential case df = 2,
// where Q = e^{−x/2} exactly.
func TestChiSquareQ(t *testing.T) {
	tests := []struct {
		x    float64
		df   int
		want float64
	}{
		{3.841, 1, 0.05},
		{10.828, 1, 0.001},
		{5.991, 2, 0.05},
		{13.816, 2, 0.001},
		{7.815, 3, 0.05},
		{16.266, 3, 0.001},
		{20.515, 5, 0.001},
		{18.307, 10, 0.05},
		{29.588, 10, 0.001},
		{124.342, 100, 0.05},
		{149.449, 100, 0.001},
	}
	for _, tt := range tests {
		assert.InEpsilon(t, tt.want, chiSquareQ(tt.x, tt.df), 0.002, "x %v, df %d", tt.x, tt.df)
	}
	for _, x := range []float64{0.5, 3, 40, 900} {
		assert.InEpsilon(t, math.Exp(-x/2), chiSquareQ(x, 2), 1e-12, "x %v", x)
	}
	assert.Equal(t, 1.0, chiSquareQ(0, 4))
	assert.Equal(t, 1.0, chiSquareQ(5, 0))
}

// TestHomogeneity checks the test of homogeneity on samples worked by
// hand: equal samples give 0; a 60/40 against a 40/60 split of 100 each
// has E = 50 in every cell and χ² = 4·10²/50 = 8 on 1 degree of freedom;
// categories with a total under 10 are pooled.
func TestHomogeneity(t *testing.T) {
	rep := func(pairs ...any) []string {
		var out []string
		for i := 0; i < len(pairs); i += 2 {
			for range pairs[i+1].(int) {
				out = append(out, pairs[i].(string))
			}
		}
		return out
	}
	tests := []struct {
		name   string
		a, b   []string
		x      float64
		df     int
		within float64
	}{
		{"same", rep("a", 30, "b", 70), rep("b", 70, "a", 30), 0, 1, 1e-12},
		{"60/40 vs 40/60", rep("a", 60, "b", 40), rep("a", 40, "b", 60), 8, 1, 1e-12},
		// c (3+3) and d (2+2) pool to 5+5: cells a 40/40, b 50/50,
		// pool 10/10; homogeneous.
		{"rare ones pooled", rep("a", 40, "b", 50, "c", 3, "d", 2), rep("a", 40, "b", 50, "c", 2, "d", 3), 0, 2, 1e-12},
		// c alone (4+4) is short of 10 and joins b: cells a 50/50,
		// b+c 50/50.
		{"short pool joins the smallest", rep("a", 50, "b", 46, "c", 4), rep("a", 50, "b", 46, "c", 4), 0, 1, 1e-12},
		{"one category", rep("a", 10), rep("a", 10), 0, 0, 1e-12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, df := homogeneity(tt.a, tt.b)
			assert.InDelta(t, tt.x, x, tt.within)
			assert.Equal(t, tt.df, df)
		})
	}
}

// TestNginxLiveHashRecorded checks the harness itself with the methods
// that do not hash server addresses: replayed on the live nginx, every
// recorded hash and ip_hash vector, keys in $arg_k and client addresses
// bound as each request's source, gives back its recorded trace. (hash
// consistent hashes the servers' addresses, which the harness does not
// choose, so those vectors replay through balance trace and the conformance
// test instead.)
func TestNginxLiveHashRecorded(t *testing.T) {
	l := liveNginx(t)
	var cases []liveCase
	var want [][]string
	for _, v := range readVectors[hashCase](t, filepath.Join("testdata", "nginx-1.22.1-hash.jsonl")) {
		if strings.HasSuffix(v.Method, "consistent") {
			continue
		}
		c := liveCase{n: len(v.Keys), method: v.Method, servers: liveServers(v.Servers)}
		if v.Method == "ip_hash" {
			for _, k := range v.Keys {
				c.clients = append(c.clients, netip.MustParseAddr(k))
			}
		} else {
			c.keys = v.Keys
		}
		cases = append(cases, c)
		want = append(want, v.Trace)
	}
	require.Len(t, cases, 13, "8 hash and 5 ip_hash vectors")
	l.replay(cases, want)
}
