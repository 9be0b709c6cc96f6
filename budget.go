package balancer

// Budget bounds the extra attempts of a client's requests: Attempts
// deposits each request it runs (Deposit), withdraws each retry and hedge
// before it picks the peer (TryWithdraw; false refuses the attempt, and
// the picker is left as it was), and gives back a withdrawn attempt whose
// pick found no peer (Refund). Package retrybudget's Budget is Finagle's
// window budget. Implementations must be safe for concurrent use, and
// should allocate nothing and take no lock: the loop calls them on every
// request. A nil Budget field is no budget; so is a nil
// *retrybudget.Budget stored in one.
type Budget interface {
	Deposit()
	TryWithdraw() bool
	Refund()
}
