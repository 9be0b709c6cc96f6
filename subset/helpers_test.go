package subset

import (
	"fmt"
	"testing"

	"github.com/lbgo/balancer"
)

// ipAddr is the i-th of a list of distinct addresses.
func ipAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d:80", i>>16&255, i>>8&255, i&255) }

// addrPeers returns n peers at ipAddr(from) onwards, each built with opts.
func addrPeers(n, from int, opts ...balancer.PeerOption) []*balancer.Peer {
	ps := make([]*balancer.Peer, n)
	for i := range ps {
		ps[i] = balancer.NewPeer(ipAddr(from+i), opts...)
	}
	return ps
}

// pickerCase is one picker of balancer's registry.
type pickerCase struct {
	name string
	new  func(peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, error)
}

// forEachPicker runs f over every picker of balancer's registry, so that a
// picker added there is a Subset's inner picker here too.
func forEachPicker(t *testing.T, f func(t *testing.T, pc pickerCase)) {
	for _, a := range balancer.Algorithms() {
		t.Run(a.Name, func(t *testing.T) { f(t, pickerCase{a.Name, a.New}) })
	}
}

// benchPeers returns n peers at ipAddr(0) onwards of weights 1 to 10 in turn.
func benchPeers(n int) []*balancer.Peer {
	ps := make([]*balancer.Peer, n)
	for i := range ps {
		ps[i] = balancer.NewPeer(ipAddr(i), balancer.Weight(i%10+1))
	}
	return ps
}
