package balancerhttp

import (
	"net/http"
	"sync/atomic"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
)

// loadReader reads the server's load report from each attempt's response
// for Outcome.Load, and counts the reports it could not trust.
type loadReader struct {
	bad atomic.Uint64 // reports loadreport.FromHeader rejected
}

// read returns the report h carries (loadreport.HeaderNameBin, else
// HeaderName), written to dst, or to a new ServerLoad if dst is nil; nil
// if h carries none. A report FromHeader rejects is counted and read as
// none, never trusted in part. With neither header, read allocates
// nothing.
func (lr *loadReader) read(h http.Header, dst *balancer.ServerLoad) *balancer.ServerLoad {
	if len(h[loadreport.HeaderNameBin]) == 0 && len(h[loadreport.HeaderName]) == 0 {
		return nil
	}
	r, err := loadreport.FromHeader(h)
	if err != nil {
		lr.bad.Add(1)
		return nil
	}
	if dst == nil {
		dst = new(balancer.ServerLoad)
	}
	*dst = r.ServerLoad()
	return dst
}
