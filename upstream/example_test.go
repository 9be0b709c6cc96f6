package upstream_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// Parse fills in nginx's defaults for what a server line leaves out:
// port 80, weight=1, max_fails=1, fail_timeout=10s.
func ExampleParse() {
	conf := []byte(`upstream back {
    server 10.0.0.1 weight=5;
    server 10.0.0.2:8080 max_fails=3 fail_timeout=30s;
    server 10.0.0.3 backup;
}
`)
	b, err := upstream.Parse("nginx.conf", conf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.Name, b.Method)
	for _, s := range b.Servers {
		fmt.Printf("line %d: %s weight=%d max_fails=%d fail_timeout=%v backup=%t\n",
			s.Line, s.Addr, s.Weight, s.MaxFails, s.FailTimeout, s.Backup)
	}
	// Output:
	// back round robin
	// line 2: 10.0.0.1:80 weight=5 max_fails=1 fail_timeout=10s backup=false
	// line 3: 10.0.0.2:8080 weight=1 max_fails=3 fail_timeout=30s backup=false
	// line 4: 10.0.0.3:80 weight=1 max_fails=1 fail_timeout=10s backup=true
}

// A block nginx refuses is refused with the line and a sentinel: nginx
// rejects weight=0 as an invalid parameter.
func ExampleParse_error() {
	conf := []byte("upstream back {\n    server 10.0.0.1;\n    server 10.0.0.2 weight=0;\n}\n")
	_, err := upstream.Parse("nginx.conf", conf)
	var pe *upstream.ParseError
	if errors.As(err, &pe) {
		fmt.Println(pe.File, pe.Line, errors.Is(err, upstream.ErrInvalidParam))
	}
	// Output:
	// nginx.conf 3 true
}

// Trace prints the servers each request goes to, as nginx logs
// $upstream_addr. For weights 5, 1, 1 nginx's smooth weighted round robin
// sends a a b a c a a: the nginx commit that introduced it ("Upstream:
// smooth weighted round-robin balancing", 2012) gives this sequence, and
// nginx 1.22.1 recorded it (testdata/nginx-1.22.1-smooth.jsonl, first case).
func ExampleTrace() {
	conf := []byte("upstream back {\n    server a weight=5;\n    server b;\n    server c;\n}\n")
	b, err := upstream.Parse("nginx.conf", conf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fixed := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := balancer.NewSmoothWRR(b.Peers(), balancer.WithClock(func() time.Time { return fixed }))
	if err != nil {
		fmt.Println(err)
		return
	}
	lines, err := upstream.Trace(p, b.Name, 7, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// a:80
	// a:80
	// b:80
	// a:80
	// c:80
	// a:80
	// a:80
}
