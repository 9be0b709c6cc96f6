package subset

import "github.com/lbgo/balancer/internal/subsetting"

// Deterministic returns the deterministic subsetting of Google's
// SRE book (chapter 20, "Load Balancing in the Datacenter") for client
// clientIndex of clientCount: the backends, in key order, are shuffled
// with the client's round (clientIndex / (B/size), B backends) as the seed,
// and the client takes slice clientIndex mod (B/size) of size backends.
//
// Balance: when size divides B, each round's B/size subsets cover every
// backend once, so every backend has the floor or the ceiling of
// clientCount·size/B clients (±1), and exactly that many when B/size also
// divides clientCount. When size does not divide B, each round leaves
// B mod size backends out and the spread can pass 1.
//
// Churn: none bounded. The shuffle depends on B, so adding or removing one
// backend redraws every subset; at 300 clients, 300 backends and subsets
// of 30, ±10% of the backends change about 27 of a client's 30 members
// (see Ring, which keeps the balance and changes one).
//
// It refuses with balancer.ErrInvalidConfig, naming the value, a size or client
// count out of [1, MaxClients] and an index out of [0, clientCount).
// The Subsetter is immutable and safe for concurrent use.
func Deterministic(clientIndex, clientCount, size int) (Subsetter, error) {
	return named("Deterministic")(subsetting.Deterministic(clientIndex, clientCount, size))
}
