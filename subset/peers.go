package subset

import (
	"fmt"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/subsetting"
)

// MaxClients bounds a subsetter's client count and subset size: far above
// any fleet, and low enough that index·backends never overflows. The
// caller sets both, so the bound is exported: a value past it is refused
// with balancer.ErrInvalidConfig.
const MaxClients = subsetting.MaxClients

// named puts a constructor's name before its refusal, and
// balancer.ErrInvalidConfig after it.
func named(who string) func(subsetting.Subsetter, error) (Subsetter, error) {
	return func(s subsetting.Subsetter, err error) (Subsetter, error) {
		if err != nil {
			return nil, fmt.Errorf("subset: %s: %v: %w", who, err, balancer.ErrInvalidConfig)
		}
		return s, nil
	}
}

// env is what a Subset's backend list needs of package balancer, through
// its exported API: its errors, and the changes of a backend outside the
// subset, which no picker holds (Peer.Adopt).
var env = &subsetting.Env[*balancer.Peer]{
	Who:       "subset",
	Invalid:   balancer.ErrInvalidConfig,
	Duplicate: balancer.ErrDuplicatePeer,
	InUse:     balancer.ErrPeerInUse,
	Unknown:   balancer.ErrUnknownPeer,
	Copy: func(p *balancer.Peer) *balancer.Peer {
		c := balancer.NewPeer(p.Addr())
		_ = c.Adopt(p) // c is new: no picker holds it, and p was accepted
		return c
	},
	Adopt: (*balancer.Peer).Adopt,
	SetWeight: func(p *balancer.Peer, w int) error {
		return p.Adopt(balancer.NewPeer(p.Addr(), append(configOf(p, p.IsDown()), balancer.Weight(w))...))
	},
	SetDown: func(p *balancer.Peer, down bool) error {
		return p.Adopt(balancer.NewPeer(p.Addr(), configOf(p, down)...))
	},
}

// configOf returns the options that give a new peer p's configuration as
// Adopt copies it (weight, max_fails, fail_timeout, max_conns, backup
// flag, value), with down as its down flag. A test holds it to Adopt.
func configOf(p *balancer.Peer, down bool) []balancer.PeerOption {
	opts := []balancer.PeerOption{
		balancer.Weight(p.Weight()),
		balancer.MaxFails(p.MaxFails()),
		balancer.FailTimeout(p.FailTimeout()),
		balancer.MaxConns(p.MaxConns()),
	}
	if p.IsBackup() {
		opts = append(opts, balancer.Backup())
	}
	if down {
		opts = append(opts, balancer.Down())
	}
	if v := p.Value(); v != nil {
		opts = append(opts, balancer.Value(v))
	}
	return opts
}
