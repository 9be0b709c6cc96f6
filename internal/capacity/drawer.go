package capacity

import (
	"math"
	"math/rand/v2"
)

// Drawer draws service times of mean 1 from a lognormal of shape Sigma,
// exp(σz − σ²/2), capped at 10 (which cuts 0.25% of draws and makes the
// mean 0.9896, TestCapDrawer), z the standard normal quantile of u. The u
// come in blocks of Strata, one uniform in each [k/Strata, (k+1)/Strata),
// in a shuffled order: every block holds the distribution's whole range,
// so a second's requests realize nearly the mean capacity, while the
// order of long and short services stays random within each block. Not
// safe for concurrent use.
type Drawer struct {
	rng   *rand.Rand
	block [Strata]float64
	next  int // block[next] is the next draw's u
}

// NewDrawer returns a Drawer whose draws follow from seed.
func NewDrawer(seed uint64) Drawer {
	return Drawer{rng: rand.New(rand.NewPCG(seed, 17)), next: Strata}
}

// Draw returns the next service time, in units of the mean.
func (d *Drawer) Draw() float64 {
	if d.next == Strata {
		for k := range d.block {
			d.block[k] = (float64(k) + d.rng.Float64()) / Strata
		}
		d.rng.Shuffle(Strata, func(i, j int) { d.block[i], d.block[j] = d.block[j], d.block[i] })
		d.next = 0
	}
	u := d.block[d.next]
	d.next++
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	return min(math.Exp(Sigma*z-Sigma*Sigma/2), 10)
}
