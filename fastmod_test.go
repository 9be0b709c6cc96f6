package balancer

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRoundRobin_fastMod(t *testing.T) {
	ns := []uint64{1, 2, 3, 5, 7, 10, 1000, 1<<31 - 1, 1 << 31, 1<<32 - 1}
	vs := []uint64{0, 1, 2, 999, 1000, 1001, 1<<31 - 1, 1 << 31, 1<<32 - 2, 1<<32 - 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		vs = append(vs, uint64(rng.Uint32()))
		ns = append(ns, uint64(rng.Uint32N(1<<20)+1))
	}
	for _, n := range ns {
		f := newFastMod(n)
		for _, v := range vs {
			if f.reduce(v) != v%n {
				assert.Equal(t, v%n, f.reduce(v), "%d mod %d", v, n)
			}
		}
	}
}
