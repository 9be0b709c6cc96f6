// Command loadtest drives a bounded HTTP load test on loopback: it runs the
// backends, and it generates the load and reports throughput and latency
// percentiles. compare.sh uses it to put the reverse proxy of
// examples/reverseproxy next to nginx with the same upstream block.
//
//	loadtest backends -addrs 127.0.0.1:9001,127.0.0.1:9002
//	loadtest run -url http://127.0.0.1:8080/ -c 32 -d 10s
//
// run keeps -c requests in flight for -d on keep-alive connections (a
// closed loop: each client sends its next request when the previous
// answer is read), after a -warmup that is not measured, and prints one
// line: requests, requests per second, latency p50, p90, p99 and max, and
// how many requests failed or got a status other than 2xx.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "backends":
		err = backends(os.Args[2:])
	case "run":
		err = load(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: loadtest backends -addrs host:port,... | loadtest run -url URL [-c N] [-d D]")
	os.Exit(2)
}

// backends serves a fixed small body on each address until interrupted.
func backends(args []string) error {
	fs := flag.NewFlagSet("backends", flag.ExitOnError)
	addrs := fs.String("addrs", "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003", "comma-separated addresses to serve on")
	size := fs.Int("size", 128, "response body size in bytes")
	delay := fs.Duration("delay", 0, "time each response takes")
	_ = fs.Parse(args)
	body := []byte(strings.Repeat("x", *size))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if *delay > 0 {
			time.Sleep(*delay) // the simulated work of a backend
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var srvs []*http.Server
	errc := make(chan error, 1)
	for _, a := range strings.Split(*addrs, ",") {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		srvs = append(srvs, srv)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "loadtest: %d backends up\n", len(srvs))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	for _, s := range srvs {
		_ = s.Close()
	}
	return nil
}

// load runs the closed-loop load and prints its one-line report.
func load(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	url := fs.String("url", "http://127.0.0.1:8080/", "URL to request")
	clients := fs.Int("c", 32, "requests kept in flight")
	dur := fs.Duration("d", 10*time.Second, "measured duration")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured time before it")
	label := fs.String("label", "", "text to start the report line with")
	_ = fs.Parse(args)

	tr := &http.Transport{
		MaxIdleConnsPerHost: *clients,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	start := time.Now()
	measureFrom := start.Add(*warmup)
	end := measureFrom.Add(*dur)
	type result struct {
		lat          []time.Duration
		errs, non2xx int
	}
	results := make([]result, *clients)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[i]
			res.lat = make([]time.Duration, 0, 1<<16)
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				resp, err := client.Get(*url)
				ok := err == nil
				if ok {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = err == nil
				}
				t1 := time.Now()
				if t0.Before(measureFrom) || t1.After(end) {
					continue // warm-up, or cut by the end: not measured
				}
				switch {
				case !ok:
					res.errs++
				case resp.StatusCode/100 != 2:
					res.non2xx++
				}
				res.lat = append(res.lat, t1.Sub(t0))
			}
		}()
	}
	wg.Wait()

	var all []time.Duration
	var errs, non2xx int
	for _, r := range results {
		all = append(all, r.lat...)
		errs += r.errs
		non2xx += r.non2xx
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))]
	}
	fmt.Printf("%srequests=%d rps=%.0f p50=%v p90=%v p99=%v max=%v errors=%d non2xx=%d\n",
		*label, len(all), float64(len(all))/dur.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.90).Round(time.Microsecond),
		pct(0.99).Round(time.Microsecond), pct(1).Round(time.Microsecond), errs, non2xx)
	return nil
}
