package balancerhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// printingLoad is a Picker that prints the load report of every outcome.
type printingLoad struct{ balancer.Balancer }

func (p printingLoad) Done(peer *balancer.Peer, o balancer.Outcome) error {
	if o.Load == nil {
		fmt.Println("no report")
	} else {
		fmt.Printf("utilization %v, %v in flight\n", o.Load.Utilization, o.Load.InFlight)
	}
	return p.Balancer.Done(peer, o)
}

// A server running loadreport's middleware says how loaded it is on every
// response; the Transport hands the report to the picker with Done.
func ExampleTransport_loadReport() {
	m, err := loadreport.New()
	if err != nil {
		panic(err)
	}
	_ = m.SetCPUUtilization(0.25)
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	defer srv.Close()

	rr, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(srv.Listener.Addr().String())})
	if err != nil {
		panic(err)
	}
	tr := &balancerhttp.Transport{Picker: printingLoad{rr}}
	client := &http.Client{Transport: tr}
	resp, err := client.Get("http://service/")
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(tr.BadLoadReports(), "bad reports")
	// Output:
	// utilization 0.25, 1 in flight
	// 0 bad reports
}
