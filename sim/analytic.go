package sim

import (
	"fmt"
	"math"
)

// MM1Mean returns the mean time in system of an M/M/1 queue with arrival
// rate lambda and service rate mu: 1/(mu−lambda). It returns +Inf when the
// queue is unstable (lambda >= mu).
func MM1Mean(lambda, mu float64) float64 {
	if lambda >= mu {
		return math.Inf(1)
	}
	return 1 / (mu - lambda)
}

// MMcMean returns the mean time in system of an M/M/c queue with arrival
// rate lambda, c workers each of service rate mu: the Erlang C probability
// of waiting over the spare capacity, plus one service time. It returns
// +Inf when the queue is unstable.
func MMcMean(lambda, mu float64, c int) float64 {
	if c < 1 || lambda >= float64(c)*mu {
		return math.Inf(1)
	}
	a := lambda / mu // offered load in Erlangs
	rho := a / float64(c)
	// Σ_{k<c} a^k/k! and a^c/c!, built term by term to stay in range.
	var sum float64
	term := 1.0
	for k := range c {
		sum += term
		term *= a / float64(k+1)
	}
	wait := term / (1 - rho)
	erlangC := wait / (sum + wait)
	return erlangC/(float64(c)*mu-lambda) + 1/mu
}

// SqrtSplit returns the static split of Poisson traffic at rate lambda over
// M/M/1 servers of rates mus that minimizes the mean time in system, and
// that mean T*.
//
// Minimizing Σ λ_i/(μ_i−λ_i) subject to Σ λ_i = Λ by a Lagrange multiplier
// gives μ_i/(μ_i−λ_i)² equal for every server in use, so μ_i−λ_i is
// proportional to √μ_i: λ_i = μ_i − √μ_i·(Σμ−Λ)/Σ√μ, the square-root rule.
// A server whose λ_i comes out negative is too slow to be worth using: it
// is dropped and the rule recomputed over the rest. Substituting back,
// T* = [(Σ√μ)²/(Σμ−Λ) − n]/Λ over the n servers in use. No fixed weights
// can do better than T* on these servers; only a policy that looks at the
// queues can.
func SqrtSplit(mus []float64, lambda float64) (split []float64, tstar float64, err error) {
	var total float64
	for i, m := range mus {
		if !(m > 0) || math.IsInf(m, 0) {
			return nil, 0, fmt.Errorf("sim: service rate %v of server %d is not positive and finite", m, i)
		}
		total += m
	}
	if !(lambda > 0) || lambda >= total {
		return nil, 0, fmt.Errorf("sim: arrival rate %v outside (0, %v)", lambda, total)
	}
	use := make([]bool, len(mus))
	for i := range use {
		use[i] = true
	}
	split = make([]float64, len(mus))
	for {
		var sumMu, sumSqrt float64
		n := 0
		for i, m := range mus {
			if use[i] {
				sumMu += m
				sumSqrt += math.Sqrt(m)
				n++
			}
		}
		spare := sumMu - lambda
		dropped := false
		for i, m := range mus {
			if !use[i] {
				split[i] = 0
				continue
			}
			split[i] = m - math.Sqrt(m)*spare/sumSqrt
			if split[i] <= 0 {
				use[i] = false
				dropped = true
			}
		}
		if !dropped {
			return split, (sumSqrt*sumSqrt/spare - float64(n)) / lambda, nil
		}
	}
}

// PooledBound returns the mean time in system of one M/M/1 server with the
// whole capacity: 1/(Σμ−Λ), a lower bound no split of the traffic reaches.
func PooledBound(mus []float64, lambda float64) float64 {
	var total float64
	for _, m := range mus {
		total += m
	}
	return MM1Mean(lambda, total)
}
