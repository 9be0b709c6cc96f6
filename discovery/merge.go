package discovery

import (
	"context"
)

// Merge returns a Resolver that asks each of rs in turn and answers all
// their targets, in order, each with Source set to its resolver's index in
// rs (so that Config.Peer can give each source's peers their own
// parameters, as each of nginx's server lines has its own), and the least
// TTL of the answers that have one. Any resolver's failure, or one that
// answers no address, fails the whole lookup, which a Watcher then reports
// while it keeps the last good list of every source.
func Merge(rs ...Resolver) Resolver { return merged(rs) }

type merged []Resolver

func (m merged) Resolve(ctx context.Context) (Result, error) {
	var out Result
	for i, r := range m {
		res, err := r.Resolve(ctx)
		if err == nil && len(res.Targets) == 0 {
			err = ErrNoAddresses
		}
		if err != nil {
			return Result{}, err
		}
		for _, t := range res.Targets {
			t.Source = i
			out.Targets = append(out.Targets, t)
		}
		if res.TTL > 0 && (out.TTL == 0 || res.TTL < out.TTL) {
			out.TTL = res.TTL
		}
	}
	return out, nil
}

// Static is a Resolver whose answer is always its targets, with no TTL:
// the servers of a list that do not change, given to Merge beside the
// names that do.
type Static []Target

// Resolve implements Resolver.
func (s Static) Resolve(context.Context) (Result, error) {
	return Result{Targets: append([]Target(nil), s...)}, nil
}
