package balancerhttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// answering starts a loopback backend that answers status and its name.
func answering(name string, status int) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, name)
	}))
}

// stalling starts a loopback backend that answers nothing until its
// caller goes away.
func stalling() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
}

func addr(s *httptest.Server) string { return s.Listener.Addr().String() }

// An http.Client whose requests are balanced over three backends by
// SmoothWRR, nginx's weighted round robin, with weights 2, 1, 1. The
// request's host, "users", is replaced by the chosen backend's address.
//
// nginx's smooth step adds each weight to its current weight, picks the
// largest (the first on a tie) and takes the total, 4, from it: current
// weights (2,1,1) pick a → (-2,1,1); (0,2,2) pick b → (0,-2,2); (2,-1,3)
// pick c → (2,-1,-1); (4,0,0) pick a → (0,0,0), where the cycle restarts.
func ExampleTransport() {
	a, b, c := answering("a", 200), answering("b", 200), answering("c", 200)
	defer a.Close()
	defer b.Close()
	defer c.Close()
	picker, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer(addr(a), balancer.Weight(2)),
		balancer.NewPeer(addr(b)),
		balancer.NewPeer(addr(c)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: picker}}
	defer client.CloseIdleConnections() // the Transport's, to every backend

	var got []string
	for range 4 {
		resp, err := client.Get("http://users/v1/profile")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close() // reports the attempt to the picker
		got = append(got, string(body))
	}
	fmt.Println(strings.Join(got, " "))
	// Output: a b c a
}

// A backend that stalls fails its attempt after ReadTimeout, nginx's
// proxy_read_timeout, as a failure of the peer: the request goes on to
// the next backend, and the stalled one, with max_fails 1, is out of the
// following picks for its fail_timeout. The client's own Timeout, here
// far longer, would instead report the attempt abandoned, no failure of
// the peer.
func ExampleTransport_readTimeout() {
	stalled, ok := stalling(), answering("ok", 200)
	defer stalled.Close()
	defer ok.Close()
	picker, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer(addr(stalled), balancer.MaxFails(1), balancer.FailTimeout(10*time.Second)),
		balancer.NewPeer(addr(ok)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := &balancerhttp.Transport{Picker: picker, ReadTimeout: 250 * time.Millisecond}
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	defer client.CloseIdleConnections()

	for range 3 {
		resp, err := client.Get("http://backends/")
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	fmt.Println("failures of the stalled peer:", picker.Peers()[0].State().Fails)
	// Output:
	// 200 ok
	// 200 ok
	// 200 ok
	// failures of the stalled peer: 1
}

// A POST that fails after the backend may have seen it is not sent again
// (its method is not idempotent), and the error says so.
func ExampleRoundTripError() {
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // no answer
		}
	}))
	defer reset.Close()
	ok := answering("ok", 200)
	defer ok.Close()
	picker, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(addr(reset)), balancer.NewPeer(addr(ok))})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: picker}}
	defer client.CloseIdleConnections()

	_, err = client.Post("http://orders/v1/orders", "application/json", strings.NewReader(`{"item":1}`))
	var rt *balancerhttp.RoundTripError
	if errors.As(err, &rt) {
		fmt.Println("attempts:", len(rt.Attempts))
		fmt.Println("not idempotent:", errors.Is(err, balancerhttp.ErrNotIdempotent))
	}
	// Output:
	// attempts: 1
	// not idempotent: true
}

// A reverse proxy over two backends, the first answering 503: the
// request goes on to the second, as nginx's proxy_next_upstream http_503,
// and the client sees its answer. The 503 is the first backend's failure.
func ExampleProxy() {
	busy, ok := answering("busy", http.StatusServiceUnavailable), answering("ok", 200)
	defer busy.Close()
	defer ok.Close()
	picker, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(addr(busy)), balancer.NewPeer(addr(ok))})
	if err != nil {
		fmt.Println(err)
		return
	}
	proxy := &balancerhttp.Proxy{Picker: picker, ReadTimeout: 30 * time.Second}
	front := httptest.NewServer(proxy) // http.ListenAndServe(":8080", proxy) in a real one
	defer front.Close()
	defer proxy.CloseIdleConnections()

	resp, err := http.Get(front.URL + "/v1/status")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("failures of the busy backend:", picker.Peers()[0].State().Fails)
	// Output:
	// 200 ok
	// failures of the busy backend: 1
}
