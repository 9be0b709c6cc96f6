package discovery_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/discovery"
)

// static is a Resolver with a fixed answer, in place of a DNS name.
type static []string

func (s static) Resolve(context.Context) (discovery.Result, error) {
	var ts []discovery.Target
	for _, a := range s {
		ts = append(ts, discovery.Target{Addr: a})
	}
	return discovery.Result{Targets: ts}, nil
}

func ExampleWatch() {
	lb, err := balancer.NewSmoothWRR(nil)
	if err != nil {
		panic(err)
	}
	// discovery.Host{Name: "api.internal", Port: "8080"} in a program.
	w, err := discovery.Watch(context.Background(), lb, static{"10.0.0.1:8080", "10.0.0.2:8080"}, discovery.Config{})
	if err != nil {
		panic(err) // the first lookup failed
	}
	defer w.Close()
	for range 4 {
		var r balancer.Request
		p, _ := lb.Pick(&r)
		fmt.Println(p.Addr())
		_ = lb.Done(p, balancer.Outcome{})
	}
	// Output:
	// 10.0.0.1:8080
	// 10.0.0.2:8080
	// 10.0.0.1:8080
	// 10.0.0.2:8080
}

// An http.Client balanced over the addresses of a DNS name, which it
// follows as they change (compiled, not run: it needs the name).
func Example_httpClient() {
	lb, err := balancer.NewLeastConn(nil)
	if err != nil {
		log.Fatal(err)
	}
	w, err := discovery.Watch(context.Background(), lb, discovery.Host{Name: "api.internal", Port: "8080"}, discovery.Config{})
	if err != nil {
		log.Fatal(err) // the first lookup failed: nothing to balance over
	}
	defer w.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: lb}}
	resp, err := client.Get("http://api.internal/") // the host is replaced by a peer's address
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}
